"""The untyped pin's rules inside one decide round: Slurm must have no choice, now and until it starts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from decide_support import context, make_round, row

from hivebatch.cells import Request
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide import Place, Round
from hivebatch.controller.decide.settle import settle_gres
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmNode


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> ControllerContext:
    return context(tmp_path_factory.mktemp("untyped"))


def _slurm_sees(r: Round, used: dict[str, list[int]]) -> None:
    """The nodes as Slurm reports them: eight GPUs each, ``used`` busy with running jobs."""
    r.ledger.nodes = {
        n: SlurmNode(n, "MIXED", False, list(range(8)), gpus_used=used.get(n, []))
        for n in ("node1", "node2", "node3", "node4")
    }


def _placed(r: Round, jid: int, vc: str, placement: dict[str, list[int]]) -> Place:
    r.alloc.adopt(str(jid), vc, 0, placement)
    return Place(r.ledger.jobs[jid], placement, None, (len(placement), len(next(iter(placement.values())))))


@pytest.mark.parametrize(
    ("busy", "gres"),
    [
        ([2, 3, 4, 5, 6, 7], "gpu:2"),  # Slurm sees exactly the chosen GPUs free: it has no choice
        ([3, 4, 5, 6, 7], "gpu:g0:1,gpu:g1:1"),  # one more free GPU there: typed
    ],
)
def test_untyped_only_on_exactly_the_gpus_slurm_sees_free(
    ctx: ControllerContext, busy: list[int], gres: str
) -> None:
    job = row(1, JobRequest(vc="nlp", gpus=2))
    r = make_round(ctx, [job])
    _slurm_sees(r, {"node1": busy, "node2": [0, 1, 2, 3, 4, 5]})
    r.out.places = [_placed(r, 1, "nlp", {"node1": [0, 1]})]
    settle_gres(r)
    assert r.out.places[0].gres == gres


def test_different_indices_per_node_need_no_symmetry_when_untyped(ctx: ControllerContext) -> None:
    job = row(1, JobRequest(vc="nlp", gpus=4))
    r = make_round(ctx, [job])
    _slurm_sees(r, {"node1": [2, 3, 4, 5, 6, 7], "node2": [0, 1, 2, 3, 4, 5]})
    r.out.places = [_placed(r, 1, "nlp", {"node1": [0, 1], "node2": [6, 7]})]
    settle_gres(r)
    assert [p.gres for p in r.out.places] == ["gpu:2"] and not r.out.waits


def test_a_victim_leaving_the_node_this_cycle_makes_it_typed(ctx: ControllerContext) -> None:
    job = row(1, JobRequest(vc="nlp", gpus=2))
    victim = row(
        2, JobRequest(vc="cv", gpus=1, qos="opportunistic"), state="running", placement={"node1": [7]}
    )
    r = make_round(ctx, [job, victim])
    _slurm_sees(r, {"node1": [2, 3, 4, 5, 6, 7]})
    r.out.places = [_placed(r, 1, "nlp", {"node1": [0, 1]})]
    r.out.victims[2] = 3  # requeued this cycle for another job: GPU 7 frees before job 1 starts
    settle_gres(r)
    assert r.out.places[0].gres == "gpu:g0:1,gpu:g1:1"


def test_a_resumed_untyped_job_waits_when_a_victim_leaves_its_node(ctx: ControllerContext) -> None:
    job = row(1, JobRequest(vc="nlp", gpus=2), state="preempted", gres="gpu:2", placement={"node3": [4, 5]})
    victim = row(
        2, JobRequest(vc="cv", gpus=1, qos="opportunistic"), state="running", placement={"node1": [7]}
    )
    r = make_round(ctx, [job, victim])
    _slurm_sees(r, {"node1": [2, 3, 4, 5, 6, 7]})
    place = _placed(r, 1, "nlp", {"node1": [0, 1]})
    place.gres, place.resumed = "gpu:2", True
    r.out.places = [place]
    r.out.victims[2] = 3
    settle_gres(r)
    assert not r.out.places and "1" not in r.alloc.jobs()
    assert "node1 are freed this cycle" in r.out.waits[0].reason


def test_settle_leaves_a_resumed_untyped_job_alone_otherwise(ctx: ControllerContext) -> None:
    job = row(1, JobRequest(vc="nlp", gpus=2), state="preempted", gres="gpu:2", placement={"node3": [4, 5]})
    r = make_round(ctx, [job])
    _slurm_sees(r, {"node1": [2, 3, 4, 5, 6, 7]})
    r.alloc.allocate(Request(job_id="9", vc="cv", gpus=1))
    place = _placed(r, 1, "nlp", {"node1": [0, 1]})
    place.gres, place.resumed = "gpu:2", True
    r.out.places = [place]
    settle_gres(r)
    assert r.out.places == [place] and place.gres == "gpu:2"


@pytest.mark.parametrize(
    ("busy", "taken", "gres", "held"),
    [
        ([0, 1, 4, 5, 6, 7], None, "gpu:1", [2, 3]),  # only its switch pair free: Slurm may pick either
        ([0, 4, 5, 6, 7], None, "gpu:g2:1", [2]),  # GPU 1 free too: Slurm's pick could split a pair
        ([0, 1, 4, 5, 6, 7], [3], "gpu:g2:1", [2]),  # the round gave GPU 3 to another job
    ],
)
def test_one_gpu_beside_its_free_pair_holds_the_pair_untyped(
    ctx: ControllerContext, busy: list[int], taken: list[int] | None, gres: str, held: list[int]
) -> None:
    job, other = row(1, JobRequest(vc="nlp", gpus=1)), row(2, JobRequest(vc="nlp", gpus=1))
    r = make_round(ctx, [job, other])
    _slurm_sees(r, {"node1": busy})
    place = _placed(r, 1, "nlp", {"node1": [2]})
    r.reqs["1"] = (job, JobRequest(vc="nlp", gpus=1))
    r.out.places = [place]
    if taken:
        r.alloc.adopt("2", "nlp", 0, {"node1": taken})
    settle_gres(r)
    assert (place.gres, place.placement) == (gres, {"node1": held})
    assert r.alloc.jobs()["1"].placement == {"node1": held}


def test_a_job_requeued_by_this_cycles_incident_makes_its_node_typed(ctx: ControllerContext) -> None:
    """The reconcile requeued job 2 (Slurm had started it on GPU 7, not on its granted 6); Slurm, as
    seen at the cycle's start, still runs it there, so GPU 7 frees while job 1 is being started."""
    job = row(1, JobRequest(vc="nlp", gpus=1))
    requeued = row(2, JobRequest(vc="nlp", gpus=1), state="preempted", gres="gpu:1", placement={"node1": [6]})
    r = make_round(ctx, [job, requeued])
    r.ledger.slurm[2] = replace(r.ledger.slurm[2], state="RUNNING", held=False, gpus={"node1": [7]})
    _slurm_sees(r, {"node1": [0, 1, 2, 3, 4, 5, 7]})
    r.out.places = [_placed(r, 1, "nlp", {"node1": [6]})]
    settle_gres(r)
    assert r.out.places[0].gres == "gpu:g6:1"
    # once Slurm shows it pending again it frees nothing more: with GPU 7 taken by other work, exact
    r.ledger.slurm[2] = replace(r.ledger.slurm[2], state="PENDING", held=True, gpus={})
    _slurm_sees(r, {"node1": [0, 1, 2, 3, 4, 5, 7]})
    r.out.places[0].gres = None
    settle_gres(r)
    assert r.out.places[0].gres == "gpu:1"
