"""Quota mode places GPUs where Slurm's select/cons_tres put them on the lab (recorded fixture)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from hivebatch.sim.quota import QuotaPool

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "cons_tres_gpu_placement.txt"


def _recorded() -> list[tuple[list[int], int, dict[str, int]]]:
    """(free GPUs per node before, GPUs asked, node -> GPUs Slurm gave) per recorded placement."""
    out = []
    for line in FIXTURE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        free, ask, got = (p.strip() for p in line.split("|"))
        given = {n: len(idx.split(",")) for n, idx in (part.split(":") for part in got.split(";"))}
        out.append(([int(x) for x in free.split(",")], int(ask.removeprefix("--gpus=")), given))
    return out


def _pool(free: list[int]) -> QuotaPool:
    # a node with k free GPUs is a node of k GPUs: what is in use elsewhere does not matter here
    nodes = [
        SimpleNamespace(name=f"node{i + 1}", gpu_type="G", gpu_indices=list(range(8 - k, 8)))
        for i, k in enumerate(free)
    ]
    return QuotaPool(nodes, {"cv": 32})


def test_every_recorded_placement_lands_on_the_nodes_slurm_chose() -> None:
    cases = _recorded()
    assert len(cases) == 9
    for n, (free, ask, given) in enumerate(cases):
        d = _pool(free).allocate(SimpleNamespace(job_id=f"j{n}", vc="cv", gpus=ask, gpu_type=None))
        assert d.result == "placed"
        assert sorted(d.placement) == sorted(given), (free, ask)
        assert sum(len(g) for g in d.placement.values()) == ask
        if len(given) == 1:  # one node: exactly Slurm's count there
            assert {k: len(v) for k, v in d.placement.items()} == given


def test_recorded_sequence_packs_single_gpu_jobs_onto_the_busy_node() -> None:
    pool = _pool([8, 8, 8, 8])
    nodes = []
    for n, ask in enumerate((2, 1, 1, 1, 1, 8)):
        d = pool.allocate(SimpleNamespace(job_id=f"j{n}", vc="cv", gpus=ask, gpu_type=None))
        nodes.append(sorted(d.placement))
    assert nodes == [["node1"]] * 5 + [["node2"]]


def test_account_limit_holds_the_job_like_grptres() -> None:
    pool = QuotaPool([SimpleNamespace(name="node1", gpu_type="G", gpu_indices=list(range(8)))], {"nlp": 4})
    for n in range(2):
        assert (
            pool.allocate(SimpleNamespace(job_id=f"b{n}", vc="nlp", gpus=2, gpu_type=None)).result == "placed"
        )
    d = pool.allocate(SimpleNamespace(job_id="b2", vc="nlp", gpus=2, gpu_type=None))
    assert d.result == "waiting" and "limit" in (d.reason or "")
