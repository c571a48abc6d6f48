"""Feasibility beyond GPUs and taking back a pin Slurm does not start (issue: Slurm's job semantics)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from pathlib import Path

import pytest
from controller_support import CONFIG, make_env
from decide_support import NOW, context, decided, make_round, row, slurm_job

from hivebatch.controller.decide.fit import features_met, unfit_nodes, why_unfit
from hivebatch.controller.decide.policy_round import run_policy_round
from hivebatch.controller.decide.room import _usable_at, screen_hopeless
from hivebatch.controller.decide.unstarted import take_back_unstarted
from hivebatch.request import JobRequest
from hivebatch.slurm.parse import parse_sinfo_json, parse_squeue_json
from hivebatch.slurm.types import SlurmJob, SlurmNode


def _node(name: str, **kw: object) -> SlurmNode:
    base = SlurmNode(name=name, state="IDLE", bad=False, gpu_indices=list(range(8)), partitions=["gpu"],
                     features=["v100"], cpus=16, cpus_free=16, mem_mb=64000, mem_free_mb=64000,
                     sockets=2, cores_per_socket=8, threads_per_core=1)  # fmt: skip
    return replace(base, **kw)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):
    return context(tmp_path_factory.mktemp("fit"))


def test_recorded_nodes_and_jobs_carry_what_placement_checks(slurm_fixture):
    (node1, *_) = parse_sinfo_json(slurm_fixture("sinfo.json"))
    assert node1.partitions == ["gpu"] and node1.cpus == 16 and node1.mem_mb > 0
    task = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_array_split.json"))}[2334]
    assert why_unfit(task, node1) == "lacks feature v100"  # recorded before the nodes had Features
    node1 = replace(node1, features=["v100"])
    assert why_unfit(task, node1) is None
    assert why_unfit(task, replace(node1, cpus_free=2)) == "2 CPUs free, the job needs 4"
    assert why_unfit(task, replace(node1, mem_free_mb=1000)) == "1000 MB memory free, the job needs 2048"
    assert why_unfit(task, replace(node1, features=["a100"])) == "lacks feature v100"
    assert why_unfit(replace(task, partition="debug"), node1) == "not in partition debug"
    assert why_unfit(replace(task, partition="debug,gpu"), node1) is None


def test_feature_expressions():
    assert features_met("v100&ib", ["v100", "ib"]) and not features_met("v100&ib", ["v100"])
    assert features_met("a100|v100", ["v100"]) and not features_met("a100|h100", ["v100"])
    assert features_met("[rack1*2&rack2]", [])  # a form only Slurm reads: Slurm judges it


def test_a_job_is_placed_only_where_its_cpus_and_memory_are_free(ctx):
    job = row(1, JobRequest(vc="nlp", gpus=8))
    r = make_round(ctx, [job])
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], cpus_per_node=12)
    r.ledger.nodes = {
        n: _node(n, cpus_free=4 if n == "node1" else 16) for n in ("node1", "node2", "node3", "node4")
    }
    r.fresh.append((job, JobRequest(vc="nlp", gpus=8), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    (place,) = r.out.places
    assert list(place.placement) == ["node2"]  # node1, first in tree order, has 4 CPUs free


def test_a_job_no_node_can_take_now_waits_saying_why(ctx):
    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], mem_per_node_mb=32000)
    r.ledger.nodes = {n: _node(n, mem_free_mb=16000) for n in ("node1", "node2", "node3", "node4")}
    r.fresh.append((job, JobRequest(vc="cv", gpus=1), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    (wait,) = r.out.waits
    assert wait.reason.startswith("no node has what it needs besides GPUs now: node1: 16000 MB memory free")
    assert not wait.rejected


def test_a_job_waiting_for_cpus_is_not_predicted_to_start_before_any_job_on_its_nodes_can_end(ctx):
    # seen on the lab: every node's CPUs held by CPU-only jobs, alice's GPU job in a VC with free
    # GPUs was predicted to start "now" while its reason said no node had a CPU for it
    from hivebatch.controller.decide.estimate import estimate_starts
    from hivebatch.slurm.types import SlurmJob

    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    r.ledger.nodes = {n: _node(n, cpus_free=0) for n in NODES}
    started = NOW.replace(tzinfo=dt.UTC) - dt.timedelta(minutes=10)
    for i, n in enumerate(NODES):  # carol's -c 16 jobs, one per node, ending 20, 30, 40, 50 min from now
        r.ledger.slurm[100 + i] = SlurmJob(job_id=100 + i, name="cpu", user="carol", account="sys", qos="normal",
                                           state="RUNNING", reason="None", nodes=[n], start_time=started,
                                           time_limit_s=(30 + 10 * i) * 60)  # fmt: skip
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], cpus_per_node=1)
    r.fresh.append((job, JobRequest(vc="cv", gpus=1), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    estimate_starts(r)
    (wait,) = r.out.waits
    assert wait.reason.startswith("no node has what it needs besides GPUs now")
    assert wait.predicted_start == NOW + dt.timedelta(minutes=20)


def test_nodes_outside_its_nodelist_do_not_make_a_waiting_job_start_now(ctx):
    # seen on the lab: bob's -w node3 job, kept off node3 by the CPUs another job held there, was
    # predicted to start "now", as node1, node2 and node4 had room
    from hivebatch.controller.decide.estimate import estimate_starts
    from hivebatch.slurm.types import SlurmJob

    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    r.ledger.nodes = {n: _node(n, cpus_free=0 if n == "node3" else 16) for n in NODES}
    started = NOW.replace(tzinfo=dt.UTC) - dt.timedelta(minutes=10)
    r.ledger.slurm[100] = SlurmJob(job_id=100, name="cpu", user="carol", account="sys", qos="normal",
                                   state="RUNNING", reason="None", nodes=["node3"], start_time=started,
                                   time_limit_s=30 * 60)  # fmt: skip
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], cpus_per_node=1, required_nodes=["node3"])
    r.fresh.append((job, JobRequest(vc="cv", gpus=1), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    estimate_starts(r)
    (wait,) = r.out.waits
    assert wait.reason.startswith("no node has what it needs besides GPUs now: node3: 0 CPUs free")
    assert wait.predicted_start == NOW + dt.timedelta(minutes=20)


def test_a_node_another_users_jobs_keep_is_not_free_before_the_last_of_them_ends(ctx):
    # seen on the lab: bob's -p x -w node3 job, kept off node3 by alice's jobs of the ExclusiveUser
    # partition x, showed START at the first of their time limits, while Slurm keeps the node hers until
    # the last one ends
    from hivebatch.controller.decide.estimate import estimate_starts

    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    r.ledger.nodes = {n: _node(n, partitions=["gpu", "x"], user_exclusive={"x"}) for n in NODES}
    r.ledger.nodes["node3"] = replace(r.ledger.nodes["node3"], users={"alice"}, firm_users={"alice"})
    started = NOW.replace(tzinfo=dt.UTC) - dt.timedelta(minutes=10)
    for sid, minutes in ((100, 30), (101, 90)):
        r.ledger.slurm[sid] = SlurmJob(job_id=sid, name="x", user="alice", account="nlp", qos="normal",
                                       state="RUNNING", reason="None", nodes=["node3"], partition="x",
                                       start_time=started, time_limit_s=minutes * 60)  # fmt: skip
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], user="bob", partition="x", required_nodes=["node3"])
    r.fresh.append((job, JobRequest(vc="cv", gpus=1), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    estimate_starts(r)
    (wait,) = r.out.waits
    assert "node3: user alice's job runs there, and partition x keeps a node to one user" in wait.reason
    assert wait.predicted_start == NOW + dt.timedelta(minutes=80)
    # a user with no job running there (one pinned, not started): when the node frees is not known
    r.ledger.nodes["node3"] = replace(
        r.ledger.nodes["node3"], users={"alice", "dave"}, firm_users={"alice", "dave"}
    )
    assert _usable_at(r, r.ledger.slurm[1], "node3") is None


def _screened(ctx, req: JobRequest, nodes: dict[str, SlurmNode], **needs: object):  # type: ignore[no-untyped-def]
    job = row(1, req)
    r = make_round(ctx, [job])
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], **needs)
    r.ledger.nodes = nodes
    r.fresh.append((job, req, r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    return r


NODES = ("node1", "node2", "node3", "node4")


@pytest.mark.parametrize(
    ("needs", "why"),
    [
        ({"mem_per_node_mb": 100000}, "node1: has 64000 MB memory, the job needs 100000"),
        ({"cpus_per_node": 64}, "node1: has 16 CPUs, the job needs 64"),
        ({"excluded_nodes": list(NODES)}, "node1: excluded by the job"),
        ({"features": "a100"}, "node1: lacks feature a100"),
        ({"sockets_per_node": 3}, "node1: has 2 sockets, the job needs 3"),
        ({"cores_per_socket": 10}, "node1: has 8 cores per socket, the job needs 10"),
        ({"threads_per_core": 2}, "node1: has 1 thread per core, the job needs 2"),
        ({"tasks_per_socket": 10}, "node1: has 8 CPUs on a socket, the job asks 10 tasks per socket"),
    ],
)
def test_a_job_no_node_could_ever_take_is_rejected_saying_so(ctx, needs: dict, why: str) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm refuses these at submit (recorded: `sbatch --mem=999G` "Requested node configuration
    # is not available"), but accepts them held (`sbatch --hold --mem=999G`), as the plugin holds GPU jobs
    r = _screened(ctx, JobRequest(vc="cv", gpus=1), {n: _node(n) for n in NODES}, **needs)
    (wait,) = r.out.waits
    assert wait.rejected and wait.reason.startswith(f"can never run as asked: {why}")
    # the excluded nodes are the one need here the owner may still change (owner_exclude_nodes.txt)
    fix = "change the nodes it lists or excludes (scontrol update JobId=1 ReqNodeList=... or ExcNodeList=...), or "
    fix = fix if "excluded" in why else ""
    assert wait.reason.endswith(f"; {fix}cancel it and submit it again with what the nodes have")


def test_a_job_asking_more_temporary_disk_than_any_node_has_is_rejected(ctx) -> None:  # type: ignore[no-untyped-def]
    # the lab's nodes have TmpDisk=0: plain Slurm refuses --tmp=100 at submit, accepts it held
    # (tests/fixtures/slurm/held_job_sizes.txt)
    nodes = {n: _node(n, tmp_disk_mb=0) for n in NODES}
    r = _screened(ctx, JobRequest(vc="cv", gpus=1), nodes, tmp_disk_mb=100)
    (wait,) = r.out.waits
    assert wait.rejected
    assert wait.reason.startswith(
        "can never run as asked: node1: has 0 MB temporary disk, the job needs 100 (--tmp)"
    )
    # a node whose disk Slurm did not report is Slurm's to judge
    r = _screened(ctx, JobRequest(vc="cv", gpus=1), {n: _node(n) for n in NODES}, tmp_disk_mb=100)
    assert [p.job.slurm_job_id for p in r.out.places] == [1]


def test_a_multi_node_job_is_rejected_when_too_few_nodes_could_ever_take_it(ctx) -> None:  # type: ignore[no-untyped-def]
    nodes = {n: _node(n, mem_mb=64000 if n == "node1" else 8000) for n in NODES}
    r = _screened(ctx, JobRequest(vc="nlp", gpus=4, nodes=2), nodes, mem_per_node_mb=32000)
    (wait,) = r.out.waits
    assert wait.rejected and "node2: has 8000 MB memory, the job needs 32000" in wait.reason
    # two nodes big enough, one of them full now: it waits for memory, not rejected
    nodes["node2"] = _node("node2", mem_free_mb=1000)
    r = _screened(ctx, JobRequest(vc="nlp", gpus=4, nodes=2), nodes, mem_per_node_mb=32000)
    assert not any(w.rejected for w in r.out.waits)


def test_a_job_goes_only_to_the_nodes_its_owner_listed(ctx):
    # seen on the lab: `sbatch -w node3 --gres=gpu:1` ran on node1; the pin had replaced the owner's list
    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    comment = 'hivebatch:v2:{"gpus":1,"nodelist":"node[3-4]","qos":"normal","vc":"cv"}'
    listed = ["node3", "node4"]
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], admin_comment=comment, required_nodes=listed)
    r.ledger.nodes = {n: _node(n) for n in ("node1", "node2", "node3", "node4")}
    assert r.unfit_for(job, r.ledger.slurm[1]) == {
        "node1": "not in its --nodelist node[3-4]",
        "node2": "not in its --nodelist node[3-4]",
    }
    r.fresh.append((job, JobRequest(vc="cv", gpus=1), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    assert not r.out.waits, [w.reason for w in r.out.waits]
    (place,) = r.out.places
    assert list(place.placement) in (["node3"], ["node4"])  # node1 comes first in tree order otherwise


@pytest.mark.parametrize(
    ("required", "tres_per_node", "unfit"),
    [
        # the owner listed other nodes while it waited (scontrol update ReqNodeList=node1), or none
        (["node1"], "", {"node2", "node3", "node4"}),
        ([], "", set()),
        # pinned once (taken back, requeued): Slurm's list is the pin, the owner's is the recorded one
        (["node1"], "gres:gpu:g0:1", {"node1", "node2"}),
    ],
)
def test_a_waiting_job_goes_to_the_nodes_its_owner_lists_now(ctx, required, tres_per_node, unfit):  # type: ignore[no-untyped-def]
    # plain Slurm lets the owner change a pending job's node list (tests/fixtures/slurm/owner_exclude_nodes.txt)
    job = row(1, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    comment = 'hivebatch:v2:{"gpus":1,"nodelist":"node[3-4]","qos":"normal","vc":"cv"}'
    sj = replace(
        r.ledger.slurm[1], admin_comment=comment, required_nodes=required, tres_per_node=tres_per_node
    )
    r.ledger.nodes = {n: _node(n) for n in ("node1", "node2", "node3", "node4")}
    assert set(r.unfit_for(job, sj)) == unfit


def test_listing_nodes_does_not_make_the_other_vcs_guarantees_look_at_risk(ctx):
    # seen on the lab: bob's `-w node3` and `-w node[3-4] -N 2` waited on an idle cluster, the nodes
    # the job must not use counted as busy when binding nlp's node cells was checked against cv and sys
    jobs = [
        row(1, JobRequest(vc="nlp", gpus=1)),
        row(2, JobRequest(vc="nlp", gpus=2, nodes=2, gpus_per_node=1)),
    ]
    r = make_round(ctx, jobs)
    for jid, wanted, listed in ((1, "node3", ["node3"]), (2, "node[3-4]", ["node3", "node4"])):
        comment = f'hivebatch:v2:{{"gpus":1,"nodelist":"{wanted}","qos":"normal","vc":"nlp"}}'
        r.ledger.slurm[jid] = replace(r.ledger.slurm[jid], admin_comment=comment, required_nodes=listed)
    r.ledger.nodes = {n: _node(n) for n in ("node1", "node2", "node3", "node4")}
    r.fresh.append((jobs[1], JobRequest(vc="nlp", gpus=2, nodes=2, gpus_per_node=1), r.ledger.slurm[2]))
    r.fresh.append((jobs[0], JobRequest(vc="nlp", gpus=1), r.ledger.slurm[1]))
    screen_hopeless(r)
    run_policy_round(r)
    assert not r.out.waits, [w.reason for w in r.out.waits]
    by_id = {p.job.slurm_job_id: sorted(p.placement) for p in r.out.places}
    assert by_id == {1: ["node3"], 2: ["node3", "node4"]}
    r.alloc.check_invariants()


def test_nodes_where_slurm_did_not_start_it_are_avoided():
    job = row(1, JobRequest(vc="cv", gpus=1))
    unfit = unfit_nodes(slurm_job(job), {"node1": _node("node1")}, frozenset({"node2"}))
    assert unfit == {"node2": "Slurm did not start the job there before"}


def test_a_pin_slurm_does_not_start_in_time_is_taken_back(ctx):
    placed = row(1, JobRequest(vc="cv", gpus=1), state="placed", placement={"node1": [0]}, gres="gpu:g0:1",
                 placed_at=NOW - dt.timedelta(seconds=ctx.settings.start_timeout_s + 1))  # fmt: skip
    fresh = row(2, JobRequest(vc="cv", gpus=1), state="placed", placement={"node1": [1]}, gres="gpu:g1:1",
                placed_at=NOW - dt.timedelta(seconds=10))  # fmt: skip
    r = make_round(ctx, [placed, fresh])
    for j in (placed, fresh):
        r.ledger.slurm[j.slurm_job_id] = replace(
            r.ledger.slurm[j.slurm_job_id], held=False, reason="Resources"
        )
        r.alloc.adopt(str(j.slurm_job_id), "cv", 0, j.placement)
    take_back_unstarted(r)
    assert [(t.job.slurm_job_id, t.why) for t in r.out.take_backs] == [
        (
            1,
            f"Slurm did not start it within {ctx.settings.start_timeout_s:.0f} s on node1:[0] (Slurm's reason: Resources)",
        )
    ]
    assert "1" not in r.alloc.jobs() and "2" in r.alloc.jobs()


def test_a_pin_whose_node_lost_the_room_it_needs_is_taken_back_within_a_minute(ctx):
    # seen on the lab: a CPU-only job took node2's CPUs between the placing of alice's job there and
    # Slurm's start (tests/fixtures/slurm/squeue_pending_reasons.json); the job waited the whole
    # 300 s bound while other nodes had room
    from hivebatch.controller.decide.unstarted import BLOCKED_AFTER_S

    def pinned(jid: int, node: str, ago: float):  # type: ignore[no-untyped-def]
        return row(jid, JobRequest(vc="cv", gpus=1), state="placed", placement={node: [jid]}, gres=f"gpu:g{jid}:1",
                   placed_at=NOW - dt.timedelta(seconds=ago))  # fmt: skip

    jobs = [
        pinned(1, "node2", BLOCKED_AFTER_S + 1),
        pinned(2, "node2", 10),
        pinned(3, "node3", BLOCKED_AFTER_S + 1),
    ]
    r = make_round(ctx, jobs)
    r.ledger.nodes = {n: _node(n, cpus_free=0 if n == "node2" else 16) for n in NODES}
    for j in jobs:
        sj = replace(r.ledger.slurm[j.slurm_job_id], held=False, reason="Resources", cpus_per_node=1)
        r.ledger.slurm[j.slurm_job_id] = sj
        r.alloc.adopt(str(j.slurm_job_id), "cv", 0, j.placement)
    take_back_unstarted(r)
    (tb,) = r.out.take_backs  # job 2 had its minute yet; job 3's node still has room: Slurm's to start
    assert tb.job.slurm_job_id == 1 and not tb.avoid
    assert tb.why == (
        "Slurm did not start it on node2:[1], where it no longer fits: node2: 0 CPUs free, the job needs 1"
        " (Slurm's reason: Resources)"
    )
    assert "1" not in r.alloc.jobs() and {"2", "3"} <= set(r.alloc.jobs())


def test_a_pin_slurm_expects_to_start_only_past_the_bound_is_taken_back_within_a_minute(ctx, slurm_fixture):
    # seen on the lab: node1 had the CPUs and GPU alice's job 494 was pinned to, but Slurm's backfill kept
    # node1 for the Operator's pending urgent job 493, so squeue expected 494 to start at 15:52, twenty
    # minutes on; the job waited the whole 300 s bound before it was placed elsewhere
    from hivebatch.controller.decide.unstarted import BLOCKED_AFTER_S

    recorded = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_priority_reservation.json"))}
    sj = recorded[494]
    assert sj.reason == "Resources" and sj.expected_start is not None and not sj.held
    placed_at = dt.datetime(2026, 11, 28, 15, 32, 26)
    job = row(494, JobRequest(vc="cv", gpus=1), state="placed", placement={"node1": [0]}, gres="gpu:g0:1",
              placed_at=placed_at)  # fmt: skip
    r = make_round(ctx, [job])
    r.ledger.slurm[494] = sj
    r.ledger.nodes = {n: _node(n, cpus_free=8 if n == "node1" else 16) for n in NODES}  # node1 has room
    r.alloc.adopt("494", "cv", 0, job.placement)
    r.now = placed_at + dt.timedelta(seconds=BLOCKED_AFTER_S - 1)
    take_back_unstarted(r)
    assert r.out.take_backs == []  # Slurm's next passes have their chance first
    r.now = placed_at + dt.timedelta(seconds=BLOCKED_AFTER_S + 1)
    take_back_unstarted(r)
    (tb,) = r.out.take_backs
    assert tb.avoid  # placed again on node1, it would wait behind the same job
    assert tb.why == (
        "Slurm expects to start it on node1:[0] only at 15:52:00 UTC, past the 300 s bound (Slurm's reason: Resources)"
    )
    # a start Slurm expects within the bound is left to Slurm
    r = make_round(ctx, [job])
    r.ledger.slurm[494] = replace(sj, expected_start=sj.expected_start - dt.timedelta(minutes=18))
    r.ledger.nodes = {n: _node(n) for n in NODES}
    r.alloc.adopt("494", "cv", 0, job.placement)
    r.now = placed_at + dt.timedelta(seconds=BLOCKED_AFTER_S + 1)
    take_back_unstarted(r)
    assert r.out.take_backs == []


def test_taken_back_job_is_placed_again_on_other_nodes(tmp_path):
    env = make_env(tmp_path, CONFIG.replace("interval_s: 1}", "interval_s: 1, start_timeout_s: 1.0}"),
                   auto_schedule=False)  # fmt: skip
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    first = env.job(jid).placement
    assert env.job(jid).state == "placed"
    env.cycle()
    assert env.job(jid).state == "placed"  # not yet past the bound
    time.sleep(1.1)  # Slurm never started it
    env.cycle()
    assert env.job(jid).state == "queued" and env.ctl.job(jid).held
    assert env.events(jid, "taken_back")
    env.cycle()
    again = env.job(jid).placement
    assert env.job(jid).state == "placed", env.job(jid).reason
    assert set(again).isdisjoint(first)
    assert sorted(again.values()) == sorted(first.values())  # same GPU index: its gres is never re-typed
    env.slurm.schedule()
    env.cycle()
    assert env.job(jid).state == "running" and env.ctl.job(jid).gpus == again


def test_a_pin_whose_node_filled_up_is_placed_again_where_it_fits_without_avoiding_it(tmp_path):
    # the cycle end to end: held again with its cells given back, placed again on a node with room, and
    # the node it left not avoided (its CPUs free up again when the CPU-only job there ends)
    from sqlalchemy import select

    from hivebatch.controller.decide.unstarted import BLOCKED_AFTER_S
    from hivebatch.db.models import Job

    env = make_env(tmp_path, auto_schedule=False)
    jid = env.submit("alice", "cv", 1)
    env.slurm._s.jobs[jid].cpus_per_node = 1  # as squeue gives it (the fake's sbatch does not read -c)
    env.cycle()
    (first,) = env.job(jid).placement
    ctl = env.ctl
    real_nodes = ctl.list_nodes

    def filled() -> list[SlurmNode]:  # a CPU-only job took every CPU of the node the job was pinned to
        return [replace(n, cpus=16, cpus_free=0 if n.name == first else 16) for n in real_nodes()]

    ctl.list_nodes = filled  # type: ignore[method-assign]
    with env.factory() as s:  # placed over a minute ago
        row_ = s.scalars(select(Job).where(Job.slurm_job_id == jid)).one()
        row_.placed_at = row_.placed_at - dt.timedelta(seconds=BLOCKED_AFTER_S + 1)
        s.commit()
    env.cycle(ctl)
    assert env.job(jid).state == "queued" and ctl.job(jid).held
    assert env.job(jid).reason.startswith(f"Slurm did not start it on {first}:")
    assert "where it no longer fits" in env.job(jid).reason and env.job(jid).reason.endswith(
        "placed again where it fits"
    )
    env.cycle(ctl)
    again = env.job(jid).placement
    assert env.job(jid).state == "placed" and first not in again
    ctl.list_nodes = real_nodes  # type: ignore[method-assign]
    from hivebatch.controller.avoid import load_avoided

    with env.factory() as s:
        assert jid not in load_avoided(s, dt.datetime.now(dt.UTC).replace(tzinfo=None), {jid})


def test_squeue_gives_the_cpus_of_all_the_tasks(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    from hivebatch.slurm.parse import parse_squeue_json

    (job,) = parse_squeue_json(slurm_fixture("squeue_cpus_over_one_node.json"))
    assert (job.cpus_total, job.cpus_per_node) == (32, 1)


def test_a_job_asking_for_all_of_a_nodes_memory_is_placed_only_where_no_job_holds_any(ctx, slurm_fixture):
    # seen on the lab: alice's `--gres=gpu:1 --mem=0` was pinned to node1, where a 4 GB job ran; Slurm gives
    # such a job all of each node's memory, so it waited there until the pin was taken back a minute later
    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_mem_zero.json"))}
    nodes = {n.name: n for n in parse_sinfo_json(slurm_fixture("sinfo_mem_held.json"))}
    mem_zero, per_gpu, running = jobs[1171], jobs[1172], jobs[1169]
    assert mem_zero.whole_node_memory and mem_zero.mem_per_node_mb == 0
    assert not per_gpu.whole_node_memory and not jobs[1173].whole_node_memory
    assert running.whole_node_memory  # Slurm started it on node3, which held no memory then
    assert unfit_nodes(mem_zero, nodes) == {
        "node1": "4096 MB memory held by other jobs, the job needs all of it (--mem=0)",
        "node2": "64000 MB memory held by other jobs, the job needs all of it (--mem=0)",
        "node3": "64000 MB memory held by other jobs, the job needs all of it (--mem=0)",
    }
    assert unfit_nodes(per_gpu, nodes) == {"node2": "0 MB memory free, the job needs 8192",
                                           "node3": "0 MB memory free, the job needs 8192"}  # fmt: skip
    job = row(1171, JobRequest(vc="cv", gpus=1))
    r = make_round(ctx, [job])
    r.ledger.slurm[1171] = replace(mem_zero, features="")
    r.ledger.nodes = nodes
    r.fresh.append((job, JobRequest(vc="cv", gpus=1), r.ledger.slurm[1171]))
    screen_hopeless(r)
    run_policy_round(r)
    (place,) = r.out.places
    assert list(place.placement) == ["node4"]


def test_a_node_is_unfit_for_a_job_whose_time_limit_runs_into_a_reservation_there(slurm_fixture):
    # plain Slurm started `-w node1 -t 20` at once and kept `-t 60` until maint1 had ended
    # (tests/fixtures/slurm/reservation_time_limit.txt)
    from hivebatch.controller.decide.fit import clear_of_reservations
    from hivebatch.slurm.parse import parse_reservations

    node1 = _node("node1")
    for r in parse_reservations(slurm_fixture("reservations.txt")):
        if "node1" in r.nodes:
            node1.reserved.append((r.start, r.end, r.name))
    now = dt.datetime(2026, 11, 28, 18, 45, 57)  # maint1 starts in 30 min
    job = replace(slurm_job(row(1, JobRequest(vc="cv", gpus=1))), time_limit_s=20 * 60)
    assert why_unfit(job, node1, now) is None
    late = replace(job, time_limit_s=60 * 60)
    why = "reserved (maint1) until 2026-11-28 20:15 UTC, which its time limit would run into"
    assert why_unfit(late, node1, now) == why
    assert why_unfit(replace(job, time_limit_s=None), node1, now) == why  # no limit runs into any
    assert why_unfit(replace(late, reservation="maint1"), node1, now) is None  # Slurm places those
    assert why_unfit(late, node1) is None  # reservations judged only where the time is given
    assert why_unfit(late, node1, dt.datetime(2026, 11, 28, 20, 16)) is None  # over
    assert clear_of_reservations(late, node1, now) == dt.datetime(2026, 11, 28, 20, 15, 55)


def test_jobs_are_placed_beside_a_coming_reservation_and_wait_for_its_end_when_nowhere_else(
    tmp_path, monkeypatch
):
    # seen on the lab: with a maintenance reservation on node1 and node2 in 30 min, alice's 1-hour job was
    # pinned to node1, taken back a minute later (Slurm expected it to start after the reservation), then
    # pinned to node2, and so on
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    env = make_env(tmp_path)
    env.slurm.reserve("maint", ["node1", "node2"], start_in_s=1800, duration_s=3600)
    long = env.submit("alice", "cv", 1, time_limit_s=3600)
    short = env.submit("carol", "sys", 1, time_limit_s=600)
    env.cycle()
    assert list(env.job(long).placement) in (["node3"], ["node4"]), env.job(long).reason
    assert env.slurm.job(long).state == "RUNNING"
    assert env.slurm.job(short).state == "RUNNING"  # it ends before the reservation starts: any node
    env.slurm.reserve("all", ["node3", "node4"], start_in_s=1800, duration_s=3600)
    late = env.submit("bob", "nlp", 1, time_limit_s=3600)
    env.cycle()
    job = env.job(late)
    assert job.state == "queued" and not job.placement
    assert job.reason.startswith("no node has what it needs besides GPUs now: node1: reserved (maint) until")
    maint = next(r for r in env.slurm.list_reservations() if r.name == "maint")
    assert job.predicted_start == maint.end  # the first window to close


def test_a_job_waits_without_cells_while_its_partition_is_down_and_is_placed_once_it_is_up(
    tmp_path, monkeypatch
):
    # seen on the lab: with the partition DOWN, alice's job was pinned to node1, taken back, pinned to node2,
    # and so on; once the partition was UP again every node was avoided, and it waited for an hour
    # (Slurm: PartitionDown, tests/fixtures/slurm/partitions_down.txt)
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    env = make_env(tmp_path)
    env.slurm.set_partition_state("gpu", "DOWN")
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "queued" and not job.placement
    assert job.reason == (
        "its partition gpu is DOWN: Slurm starts no job there until an admin sets it UP again; "
        "it holds no GPUs meanwhile"
    )
    env.slurm.set_partition_state("gpu", "UP")
    env.cycle()
    assert env.job(jid).placement and env.slurm.job(jid).state == "RUNNING"


def test_a_pin_whose_partition_went_down_is_taken_back_without_avoiding_its_node(ctx):
    from hivebatch.controller.decide.unstarted import BLOCKED_AFTER_S

    job = row(1, JobRequest(vc="cv", gpus=1), state="placed", placement={"node1": [0]}, gres="gpu:g0:1",
              placed_at=NOW - dt.timedelta(seconds=ctx.settings.start_timeout_s + BLOCKED_AFTER_S))  # fmt: skip
    r = make_round(ctx, [job])
    r.ledger.nodes = {n: _node(n, stopped={"gpu": "DOWN"}) for n in NODES}
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], held=False, reason="PartitionDown", partition="gpu")
    r.alloc.adopt("1", "cv", 0, job.placement)
    take_back_unstarted(r)
    (tb,) = r.out.take_backs
    assert not tb.avoid  # the node is fine: it is used again once the partition is UP
    assert "where it no longer fits: node1: its partition gpu is DOWN" in tb.why


def test_a_pin_slurms_own_limit_keeps_from_starting_is_taken_back_at_once_and_tried_again_later(
    tmp_path, monkeypatch
):
    # seen on the lab: with the normal QOS capped at 2 GPUs per user (tests/fixtures/slurm/qos_user_gpu_limit.txt),
    # alice's second 2-GPU job was pinned node after node, its cells held idle, each node then avoided
    from hivebatch.controller.decide import unstarted

    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    env = make_env(tmp_path)
    env.slurm.set_qos_gpu_limit("normal", 2)
    first = env.submit("alice", "cv", 2)
    second = env.submit("alice", "cv", 2)
    env.cycle()
    assert env.slurm.job(first).state == "RUNNING"
    assert env.slurm.job(second).reason == "QOSMaxGRESPerUser"  # pinned, released, not started
    env.cycle()
    job = env.job(second)
    assert job.state == "queued" and job.reason.startswith(
        "Slurm's own limits keep it from starting (Slurm's reason: QOSMaxGRESPerUser); hivebatch places it "
        "again within 60 s, holding no GPUs meanwhile"
    )
    assert second not in {b.slurm_job_id for b in _bindings(env)}  # its cells are free
    env.cycle()
    assert env.job(second).state == "queued" and len(env.events(second, kind="placed")) == 1  # not tried yet
    with env.factory() as s:
        from hivebatch.controller.avoid import load_avoided

        assert second not in load_avoided(s, env.job(second).placed_at, {second})  # no node is avoided
    env.slurm.finish(first)
    monkeypatch.setattr(unstarted, "LIMIT_RETRY_S", 0.0)
    env.cycle()
    env.cycle()
    assert env.slurm.job(second).state == "RUNNING"


def test_a_pin_slurm_starts_as_the_controller_takes_it_back_is_followed_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on the lab the limit let the job start between the cycle's read and its hold: "Job is no longer
    # pending execution" (tests/fixtures/slurm/err_hold_running_managed.txt) was reported a failure
    from hivebatch.controller.decide import unstarted

    env = make_env(tmp_path)
    env.slurm.set_qos_gpu_limit("normal", 2)
    first = env.submit("alice", "cv", 2)
    second = env.submit("alice", "cv", 2)
    env.cycle()
    env.cycle()
    assert env.job(second).state == "queued" and len(env.events(second, kind="taken_back")) == 1
    monkeypatch.setattr(unstarted, "LIMIT_RETRY_S", 0.0)
    env.cycle()  # placed again, and again not started while the first runs
    assert env.job(second).state == "placed"
    ctl = env.ctl
    hold = ctl.hold

    def started_meanwhile(job_id: int) -> None:
        if job_id == second:
            env.slurm.finish(first)  # the limit lets Slurm start the pin
            if env.slurm.job(second).state == "PENDING":
                env.slurm.start(second)
        hold(job_id)

    monkeypatch.setattr(ctl, "hold", started_meanwhile)
    report = env.cycle(ctl)
    assert report.ok, report.failures
    env.cycle()
    assert env.job(second).state == "running" and len(env.events(second, kind="taken_back")) == 1


def _bindings(env):  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from hivebatch.db import GpuBinding

    with env.factory() as s:
        return list(s.scalars(select(GpuBinding)).all())


def test_a_limit_on_each_job_tells_its_owner_to_change_the_job(ctx, slurm_fixture):
    # Slurm keeps a job over its QOS's MaxWall pending until its owner lowers its limit
    # (tests/fixtures/slurm/qos_max_wall.txt)
    assert "QOSMaxWallDurationPerJobLimit" in slurm_fixture("qos_max_wall.txt")
    job = row(5, JobRequest(vc="cv", gpus=1), state="placed", placement={"node1": [0]}, gres="gpu:g0:1",
              placed_at=NOW - dt.timedelta(seconds=3))  # fmt: skip
    r = make_round(ctx, [job])
    r.ledger.slurm[5] = replace(r.ledger.slurm[5], held=False, reason="QOSMaxWallDurationPerJobLimit")
    r.alloc.adopt("5", "cv", 0, job.placement)
    take_back_unstarted(r)
    (tb,) = r.out.take_backs
    assert not tb.avoid and tb.why.startswith("Slurm's own limits keep it from starting")
    assert tb.then.endswith("the limit is on each job: change it (scontrol update job 5 …) or cancel it")


def test_jobs_placed_in_one_cycle_get_nodes_that_hold_their_cpus_together(tmp_path: Path) -> None:
    # on the lab four -c 16 GPU jobs were pinned to one 16-CPU node in one cycle; three waited a minute
    # each, one started per minute, while nodes stood idle
    env = make_env(tmp_path)
    jobs = [env.submit("bob", "nlp", 1, extra=["-c", "16"]) for _ in range(3)]
    env.cycle()
    placed = [env.job(j) for j in jobs if env.job(j).state in ("placed", "running")]
    nodes = [next(iter(j.placement or {})) for j in placed]
    assert len(placed) == 2 and len(set(nodes)) == 2  # nlp's two node cells, one job on each
    third = env.job(jobs[2])
    assert third.state == "queued"
    assert "node1: 0 CPUs left beside the jobs pinned there, the job needs 16" in (third.reason or "")
    # its GPUs are free now, the CPUs beside them once the first pins end
    assert third.predicted_start == min(j.predicted_end for j in placed if j.predicted_end)
    env.slurm.as_user("hbctl").cancel(jobs[0])
    env.cycle()
    env.cycle()
    assert env.job(jobs[2]).state in ("placed", "running")


def test_a_job_whose_tasks_fill_its_one_node_takes_that_nodes_cpus_in_the_round(tmp_path: Path) -> None:
    # on the lab `-B 2:8:1 --gres=gpu:1` (16 tasks, MinCPUsNode 1, as `-n 16`) was pinned to node1 with two
    # small jobs beside it in one cycle; Slurm started it, and the two waited for CPUs node1 no longer had
    env = make_env(tmp_path)
    wide = env.submit("bob", "nlp", 1, extra=["-n", "16"])
    small = [env.submit("bob", "nlp", 1, extra=["-c", "4"]) for _ in range(2)]
    env.cycle()
    (node,) = env.job(wide).placement or {}
    others = [next(iter(env.job(j).placement or {})) for j in small]
    assert node not in others, (node, others)
    assert all(env.slurm.job(j).state == "RUNNING" for j in [wide, *small])


def test_a_job_whose_tasks_share_one_node_takes_their_memory_per_cpu_in_the_round(tmp_path: Path) -> None:
    # on the lab two `-n 8 --mem-per-cpu=6000 --gres=gpu:1` jobs were pinned to node1 in one cycle: 96000
    # MB on a 64000 MB node, and Slurm left the second waiting for memory while nlp's other node was idle
    env = make_env(tmp_path)
    jobs = [env.submit("bob", "nlp", 1, extra=["-n", "8", "--mem-per-cpu=6000"]) for _ in range(2)]
    env.cycle()
    nodes = [next(iter(env.job(j).placement or {})) for j in jobs]
    assert len(set(nodes)) == 2, nodes


def _job(**kw: object) -> SlurmJob:
    return replace(
        SlurmJob(job_id=1, name="j", user="alice", account="cv", qos="normal", state="PENDING", reason=""),
        **kw,
    )


def _capped(name: str, used: int = 0) -> SlurmNode:
    """A lab node also in partition small, whose MaxCPUsPerNode=8 (partition_max_cpus.txt)."""
    return _node(name, partitions=["gpu", "small"], max_cpus={"small": 8}, cpus_in_partition={"small": used})


def test_a_job_is_not_pinned_where_its_partitions_cpus_are_held_by_its_other_jobs() -> None:
    # plain Slurm kept an 8-CPU job of partition small pending (Resources) beside another 8-CPU job of
    # small on a 16-CPU node (partition_max_cpus.txt)
    sj = _job(partition="small", cpus_per_node=8)
    unfit = unfit_nodes(sj, {"node3": _capped("node3", used=8), "node4": _capped("node4", used=2)})
    assert unfit == {
        "node3": "0 of the 8 CPUs partition small allows free, the job needs 8",
        "node4": "6 of the 8 CPUs partition small allows free, the job needs 8",
    }
    assert unfit_nodes(replace(sj, cpus_per_node=6), {"node4": _capped("node4", used=2)}) == {}


def test_the_cpus_a_partitions_running_jobs_hold_are_counted_on_each_node() -> None:
    from hivebatch.controller.observe import count_running_jobs

    # the recorded 1170 (small, 16 CPUs on node[3-4]) running, 1171 waiting, a job of gpu beside them
    jobs = [
        _job(job_id=1170, state="RUNNING", partition="small", nodes=["node3", "node4"], cpus_total=16),
        _job(job_id=1171, state="PENDING", partition="small", cpus_total=8),
        _job(job_id=1174, state="RUNNING", partition="gpu", nodes=["node3"], cpus_total=4),
    ]
    nodes = {n: _capped(n) for n in ("node3", "node4")} | {"node1": _node("node1")}
    count_running_jobs(jobs, nodes)
    assert [nodes[n].cpus_in_partition for n in ("node1", "node3", "node4")] == [
        {},
        {"small": 8},
        {"small": 8},
    ]


@pytest.mark.parametrize(
    ("caps", "over", "under", "why"),
    [
        # plain Slurm refused `srun -p small -N 1 -c 12` at submit with MaxCPUsPerNode=8; through hivebatch
        # it was pinned, held again as BadConstraints and waited until killed (partition_max_cpus.txt)
        ({"max_cpus": {"p": 8}}, {"cpus_per_node": 12}, {"cpus_per_node": 8},
         "partition p lets a job use 8 of its CPUs (MaxCPUsPerNode), the job needs 12"),
        # plain Slurm left `--mem=40000` pending for ever (MaxMemPerLimit) with MaxMemPerNode=30000; Slurm
        # refused hivebatch's pin of it every cycle (partition_max_mem.txt)
        ({"max_mem_mb": {"p": 30000}}, {"mem_per_node_mb": 40000}, {"mem_per_node_mb": 20000},
         "partition p lets a job use 30000 MB of its memory (MaxMemPerNode), the job needs 40000"),
    ],
)  # fmt: skip
def test_a_job_needing_more_of_a_node_than_its_partition_allows_is_rejected(
    ctx, caps: dict[str, object], over: dict[str, object], under: dict[str, object], why: str
) -> None:  # type: ignore[no-untyped-def]
    nodes = {n: _node(n, partitions=["gpu", "p"], **caps) for n in NODES}
    r = _screened(ctx, JobRequest(vc="cv", gpus=1), nodes, partition="p", **over)
    (wait,) = r.out.waits
    assert wait.rejected and wait.reason.startswith(f"can never run as asked: node1: {why}")
    # within the cap, or in the node's other partition, which has none, it runs
    for partition, asks in (("p", under), ("gpu", over)):
        r = _screened(ctx, JobRequest(vc="cv", gpus=1), nodes, partition=partition, **asks)
        assert [p.job.slurm_job_id for p in r.out.places] == [1]
    # asked in both, the partition without a cap lets it
    assert why_unfit(_job(partition="p,gpu", **over), nodes["node1"]) is None


def test_a_job_its_partition_keeps_out_holds_no_gpus_and_is_told_how_to_move(ctx) -> None:  # type: ignore[no-untyped-def]
    # Slurm accepted alice's job in a partition of AllowAccounts=nlp and left it pending for ever; hivebatch
    # placed it on cv's cells (partition_access.txt)
    from hivebatch.slurm.types import PartitionAccess

    caps = {"partitions": ["gpu", "p"], "access": {"p": PartitionAccess(allow_accounts=frozenset({"nlp"}))}}
    r = decided(ctx, JobRequest(vc="cv", gpus=1), nodes_kw=caps, partition="p", account="cv")
    (wait,) = r.out.waits
    assert wait.not_startable and not r.out.places
    assert wait.reason == (
        "Slurm never starts it where it asked: partition p allows account nlp not cv; "
        "move it (scontrol update job 1 Partition=...) or cancel it"
    )
    r = decided(ctx, JobRequest(vc="cv", gpus=1), nodes_kw=caps, partition="p,gpu", account="cv")
    assert [p.job.slurm_job_id for p in r.out.places] == [1]  # gpu lets it in


def test_nodes_outside_the_jobs_partitions_are_named_last() -> None:
    # seen on the lab: "can never run as asked: node1: not in partition p; node2: not in partition p;
    # node3: has 64000 MB memory, the job needs 70000; and 1 more" hid node4 and led with what says nothing
    from hivebatch.controller.decide.fit import unfit_text

    unfit = {
        "node1": "not in partition p",
        "node2": "not in partition p",
        "node3": "has 64000 MB memory, the job needs 70000",
        "node4": "has 64000 MB memory, the job needs 70000",
    }
    assert unfit_text(unfit) == (
        "node3: has 64000 MB memory, the job needs 70000; node4: has 64000 MB memory, the job needs 70000; "
        "node1: not in partition p; and 1 more"
    )
    # seen on the lab: a job of --nodelist node3 read "node1: not in its --nodelist node3; node2: not in its
    # --nodelist node3; node3: 0 CPUs free, the job needs 16; and 1 more"
    listed = {
        "node1": "not in its --nodelist node3",
        "node2": "excluded by the job",
        "node3": "0 CPUs free, the job needs 16",
    }
    assert unfit_text(listed, limit=1) == "node3: 0 CPUs free, the job needs 16; and 2 more"
