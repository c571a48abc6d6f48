"""Each step of decide on its own, on a Round built by hand (no database, no Slurm)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from decide_support import NOW, context, make_round, row

from hivebatch.cells import Request
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide import STEPS, Place, Wait
from hivebatch.controller.decide.classify import classify
from hivebatch.controller.decide.estimate import estimate_starts
from hivebatch.controller.decide.policy_round import run_policy_round
from hivebatch.controller.decide.resume import resume_requeued
from hivebatch.controller.decide.room import screen_hopeless
from hivebatch.controller.decide.settle import attach_notes, settle_gres
from hivebatch.controller.decide.victims import take_victims
from hivebatch.request import JobRequest


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> ControllerContext:
    return context(tmp_path_factory.mktemp("decide"))


def test_steps_run_in_the_documented_order() -> None:
    assert [s.__name__ for s in STEPS] == [
        "prime_notices",
        "take_back_unstarted",
        "classify",
        "resume_requeued",
        "place_slices",
        "screen_hopeless",
        "run_policy_round",
        "hold_back_licensed",
        "collect_notices",
        "settle_gres",
        "attach_notes",
        "estimate_starts",
        "suggest_opportunistic",
    ]


def test_classify_sorts_the_queue_and_rejects_bad_requests(ctx: ControllerContext) -> None:
    plain = row(1, JobRequest(vc="cv", gpus=2))
    no_gpu = row(2, JobRequest(vc="cv", gpus=0))
    bad_vc = row(3, JobRequest(vc="vision", gpus=1))
    requeued = row(4, JobRequest(vc="nlp", gpus=2), state="preempted", gres="gpu:g0:1,gpu:g1:1",
                   placement={"node3": [0, 1]})  # fmt: skip
    acting = row(5, JobRequest(vc="cv", gpus=1), intent="place")
    r = make_round(ctx, [plain, no_gpu, bad_vc, requeued, acting])
    r.ledger.slurm[1].held = True
    classify(r)
    assert [j.slurm_job_id for j, _r, _s in r.fresh] == [1]
    assert [j.slurm_job_id for j, _r in r.requeued] == [4]
    assert [(p.job.slurm_job_id, p.placement, p.gres) for p in r.out.places] == [(2, {}, None)]
    (wait,) = r.out.waits
    assert wait.job is bad_vc and wait.rejected and wait.reason.startswith("unknown VC 'vision'")


def test_classify_leaves_jobs_slurm_does_not_hold(ctx: ControllerContext) -> None:
    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    r.ledger.slurm[1].held = False
    classify(r)
    assert not r.fresh and not r.out.places and not r.out.waits


def test_requeued_job_resumes_on_its_indices_elsewhere_when_its_node_is_taken(ctx: ControllerContext) -> None:
    job = row(4, JobRequest(vc="nlp", gpus=2), state="preempted", gres="gpu:g2:1,gpu:g3:1",
              placement={"node3": [2, 3]})  # fmt: skip
    r = make_round(ctx, [job])
    r.alloc.occupy_foreign("other@node3", "node3", [2])
    r.gmap = r.alloc.gpu_map()
    r.requeued.append((job, JobRequest(vc="nlp", gpus=2)))
    resume_requeued(r)
    (place,) = r.out.places
    assert place.resumed and place.gres == "gpu:g2:1,gpu:g3:1"
    (node,) = place.placement
    assert node != "node3" and place.placement[node] == [2, 3]
    assert r.gmap[node][2].job == "4" and r.placed_now[4] is place


def test_requeued_job_does_not_resume_where_its_cells_would_take_another_vcs_guarantee(
    ctx: ControllerContext,
) -> None:
    # the example cluster is exactly full of guarantees (nlp two nodes, cv one and a socket, sys half a
    # socket); with node1's GPU 3 taken by outside work, a sys cell on any other node would split a node
    # nlp or cv is guaranteed. sys, charged with the shortfall, waits instead of taking it from them.
    job = row(4, JobRequest(vc="sys", gpus=1), state="preempted", gres="gpu:g3:1", placement={"node1": [3]},
              start_time=NOW - dt.timedelta(hours=1))  # fmt: skip
    r = make_round(ctx, [job])
    r.alloc.occupy_foreign("other@node1", "node1", [3])
    r.gmap = r.alloc.gpu_map()
    r.requeued.append((job, JobRequest(vc="sys", gpus=1)))
    resume_requeued(r)
    assert not r.out.places and "4" not in r.alloc.jobs()
    assert r.out.waits[0].reason == (
        "requeued with GPUs [3] per node; "
        "its VC's cells on node4 would leave another VC's guaranteed cells without GPUs"
    )
    assert not r.alloc.shortfall()["nlp"] and not r.alloc.shortfall()["cv"]


def test_requeued_job_waits_when_fewer_gpus_are_idle(ctx: ControllerContext) -> None:
    job = row(
        4,
        JobRequest(vc="nlp", gpus=2),
        state="preempted",
        placement={"node3": [2, 3]},
        gres="gpu:g2:1,gpu:g3:1",
        start_time=NOW - dt.timedelta(hours=1),
    )
    r = make_round(ctx, [job])
    for node in ("node1", "node2", "node3", "node4"):
        r.alloc.occupy_foreign(f"busy@{node}", node, list(range(8)))
    r.gmap = r.alloc.gpu_map()
    r.requeued.append((job, JobRequest(vc="nlp", gpus=2)))
    resume_requeued(r)
    assert not r.out.places
    assert (
        r.out.waits[0].reason
        == "requeued with GPUs [2, 3] per node; waits until 1 node(s) have those indices free"
    )


def test_a_job_taken_back_says_which_nodes_it_cannot_use(ctx: ControllerContext) -> None:
    # seen on the lab: taken back from node1 (Slurm kept it for a job of higher priority) while node2-4
    # were drained, it waited "requeued …; until 1 node(s) have those indices free", which node1 had
    job = row(4, JobRequest(vc="cv", gpus=1), state="queued", gres="gpu:g0:1", placement={"node1": [0]})
    r = make_round(ctx, [job])
    r.ledger.avoided = {4: frozenset({"node1"})}
    r.ledger.bad_nodes = {"node2", "node3", "node4"}
    r.requeued.append((job, JobRequest(vc="cv", gpus=1)))
    resume_requeued(r)
    assert not r.out.places
    assert r.out.waits[0].reason == (
        "taken back with GPUs [0] per node; waits until 1 node(s) have those indices free; it cannot use"
        " node1: Slurm did not start the job there before; node2: takes no new work; node3: takes no new work;"
        " and 1 more"
    )
    # no node it may use now: no start is predicted for it (hq showed "now")
    assert r.out.waits[0].not_startable
    r = make_round(ctx, [job])
    r.ledger.avoided = {4: frozenset({"node1"})}
    r.requeued.append((job, JobRequest(vc="cv", gpus=1)))
    r.alloc.occupy_foreign("busy@node2", "node2", [0])
    r.alloc.occupy_foreign("busy@node3", "node3", [0])
    r.alloc.occupy_foreign("busy@node4", "node4", [0])
    r.gmap = r.alloc.gpu_map()
    resume_requeued(r)
    assert not r.out.places and not r.out.waits[0].not_startable  # node2-4 free their GPU 0 some time


def test_screen_hopeless_keeps_only_jobs_that_may_fit(ctx: ControllerContext) -> None:
    small = row(1, JobRequest(vc="sys", gpus=2))
    big = row(2, JobRequest(vc="sys", gpus=6))
    r = make_round(ctx, [small, big])
    for job in (small, big):
        r.fresh.append((job, JobRequest(vc="sys", gpus=job.gpus), r.ledger.slurm[job.slurm_job_id]))
    screen_hopeless(r)
    assert [t.job_id for t in r.tasks] == ["1"] and set(r.reqs) == {"1"}
    (wait,) = r.out.waits
    assert wait.job is big and not wait.rejected
    assert wait.reason == "waiting for VC sys's GPUs: it needs 6 of the VC's 4, fewer are free now"


def test_policy_round_places_tasks_on_the_cells(ctx: ControllerContext) -> None:
    job = row(1, JobRequest(vc="cv", gpus=4))
    r = make_round(ctx, [job])
    r.fresh.append((job, JobRequest(vc="cv", gpus=4), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    (place,) = r.out.places
    assert place.shape == (1, 4) and sum(len(v) for v in place.placement.values()) == 4
    assert r.alloc.jobs()["1"].gpus == 4


def test_settle_gres_types_symmetric_placements_and_gives_back_the_rest(ctx: ControllerContext) -> None:
    ok = row(1, JobRequest(vc="nlp", gpus=4))
    skew = row(2, JobRequest(vc="nlp", gpus=4))
    r = make_round(ctx, [ok, skew])
    r.alloc.allocate(Request(job_id="2", vc="nlp", gpus=4))
    r.out.places = [Place(ok, {"node1": [0, 1], "node2": [0, 1]}, None, (2, 2)),
                    Place(skew, {"node1": [2, 3], "node2": [4, 5]}, None, (2, 2))]  # fmt: skip
    settle_gres(r)
    assert [(p.job.slurm_job_id, p.gres) for p in r.out.places] == [(1, "gpu:g0:1,gpu:g1:1")]
    assert r.out.waits[0].job is skew and "same GPU indices on every node" in r.out.waits[0].reason
    assert "2" not in r.alloc.jobs()


def test_attach_notes_reaches_placed_and_waiting_jobs(ctx: ControllerContext) -> None:
    placed, waiting, rejected = (row(i, JobRequest(vc="cv", gpus=1)) for i in (1, 2, 3))
    r = make_round(ctx, [placed, waiting, rejected])
    r.builder.notes.update({1: "model m unknown; planned as a plain job", 2: "like n", 3: "x"})
    r.out.places = [Place(placed, {"node1": [0]}, "gpu:g0:1", (1, 1))]
    r.out.waits = [Wait(waiting, "waiting for GPUs"), Wait(rejected, "bad", rejected=True)]
    attach_notes(r)
    assert r.out.places[0].note == "model m unknown; planned as a plain job"
    assert [w.reason for w in r.out.waits] == ["waiting for GPUs (like n)", "bad"]


def test_take_victims_takes_back_a_victim_placed_this_round(ctx: ControllerContext) -> None:
    early, late, running = (row(i, JobRequest(vc="cv", gpus=1)) for i in (1, 2, 3))
    r = make_round(ctx, [early, late, running])
    first = Place(early, {"node1": [0]}, None, (1, 1))
    r.add_place(first)
    winner = Place(late, {"node1": [0, 1]}, None, (1, 2))
    take_victims(r, winner, ["1", "3", "999"])
    assert r.out.places == [] and 1 not in r.placed_now
    assert r.out.waits[0].reason == "its GPUs went to job 2 before it started"
    assert r.out.victims == {3: 2} and winner.preempts == [3]


def test_estimate_starts_queues_waiting_jobs_behind_running_ones(ctx: ControllerContext) -> None:
    running = row(1, JobRequest(vc="sys", gpus=2), state="running", predicted_end=NOW + dt.timedelta(hours=1),
                  placement={"node4": [0, 1]})  # fmt: skip
    first, second = row(2, JobRequest(vc="sys", gpus=4)), row(3, JobRequest(vc="sys", gpus=4))
    r = make_round(ctx, [running, first, second])
    assert r.alloc.adopt("1", "sys", 0, {"node4": [0, 1]}).result == "placed"
    r.out.waits = [Wait(first, "w", latency_s=1800.0), Wait(second, "w", latency_s=600.0)]
    estimate_starts(r)
    assert r.out.waits[0].predicted_start == NOW + dt.timedelta(hours=1)
    assert r.out.waits[0].predicted_end == NOW + dt.timedelta(hours=1, minutes=30)
    assert r.out.waits[1].predicted_start == NOW + dt.timedelta(hours=1, minutes=30)


def test_estimate_leaves_a_job_behind_one_of_unknown_length_without_a_start(ctx: ControllerContext) -> None:
    first, second = row(2, JobRequest(vc="sys", gpus=4)), row(3, JobRequest(vc="sys", gpus=4))
    r = make_round(ctx, [first, second])
    r.out.waits = [Wait(first, "w"), Wait(second, "w")]
    estimate_starts(r)
    assert r.out.waits[0].predicted_start == NOW and r.out.waits[1].predicted_start is None


def test_a_job_slurm_would_not_start_gets_no_start_and_takes_no_gpus_in_the_estimate(
    ctx: ControllerContext,
) -> None:
    # seen on the lab: hq said START "now" of a job whose dependency could never be met
    blocked, after = row(2, JobRequest(vc="sys", gpus=4)), row(3, JobRequest(vc="sys", gpus=4))
    r = make_round(ctx, [blocked, after])
    r.out.waits = [Wait(blocked, "its dependency afterok:1 can never be met", latency_s=600.0, not_startable=True),
                   Wait(after, "w", latency_s=600.0)]  # fmt: skip
    estimate_starts(r)
    assert r.out.waits[0].predicted_start is None and r.out.waits[0].predicted_end is None
    assert r.out.waits[1].predicted_start == NOW  # the VC's 4 GPUs are its own


def test_whole_decide_on_a_hand_built_round(ctx: ControllerContext, tmp_path: Path) -> None:
    from hivebatch.controller.decide import decide

    jobs = [row(1, JobRequest(vc="cv", gpus=8)), row(2, JobRequest(vc="cv", gpus=8))]
    r = make_round(ctx, jobs)
    out = decide(ctx, r.ledger, NOW)
    assert [p.job.slurm_job_id for p in out.places] == [1]
    assert [w.job.slurm_job_id for w in out.waits] == [2]
