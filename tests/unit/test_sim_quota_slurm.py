"""Quota mode places GPUs where Slurm's select/cons_tres put them on the lab (recorded fixture)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from hivebatch.sim.quota import QuotaPool

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "cons_tres_gpu_placement.txt"


def _recorded() -> list[tuple[list[int], SimpleNamespace, dict[str, int]]]:
    """(free GPUs per node before, request, node -> GPUs Slurm gave; {} = pending) per recorded line."""
    out = []
    for n, line in enumerate(FIXTURE.read_text().splitlines()):
        if not line.strip() or line.startswith("#"):
            continue
        free, ask, got = (p.strip() for p in line.split("|"))
        if ask.startswith("--gpus="):
            req = SimpleNamespace(job_id=f"j{n}", vc="cv", gpus=int(ask.removeprefix("--gpus=")), nodes=None)
        else:  # -N n --gres=gpu:g
            _, nodes, gres = ask.split()
            per_node = int(gres.rsplit(":", 1)[1])
            req = SimpleNamespace(job_id=f"j{n}", vc="cv", gpus=int(nodes) * per_node, nodes=int(nodes))
        req.gpu_type = None
        given = (
            {}
            if got.startswith("PENDING")
            else {n: len(idx.split(",")) for n, idx in (part.split(":") for part in got.split(";"))}
        )
        out.append(([int(x) for x in free.split(",")], req, given))
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
    assert len(cases) == 13
    for free, req, given in cases:
        d = _pool(free).allocate(req)
        if not given:
            assert d.result == "waiting", (free, req)
            continue
        assert d.result == "placed"
        assert sorted(d.placement) == sorted(given), (free, req)
        assert sum(len(g) for g in d.placement.values()) == req.gpus
        if len(given) == 1 or req.nodes:  # Slurm's split is followed exactly there
            assert {k: len(v) for k, v in d.placement.items()} == given


def test_recorded_sequence_packs_single_gpu_jobs_onto_the_busy_node() -> None:
    pool = _pool([8, 8, 8, 8])
    nodes = []
    for n, ask in enumerate((2, 1, 1, 1, 1, 8)):
        d = pool.allocate(SimpleNamespace(job_id=f"j{n}", vc="cv", gpus=ask, nodes=None, gpu_type=None))
        nodes.append(sorted(d.placement))
    assert nodes == [["node1"]] * 5 + [["node2"]]


def test_account_limit_holds_the_job_like_grptres() -> None:
    pool = QuotaPool([SimpleNamespace(name="node1", gpu_type="G", gpu_indices=list(range(8)))], {"nlp": 4})
    for n in range(2):
        assert (
            pool.allocate(SimpleNamespace(job_id=f"b{n}", vc="nlp", gpus=2, nodes=1, gpu_type=None)).result
            == "placed"
        )
    d = pool.allocate(SimpleNamespace(job_id="b2", vc="nlp", gpus=2, nodes=1, gpu_type=None))
    assert d.result == "waiting" and "limit" in (d.reason or "")
