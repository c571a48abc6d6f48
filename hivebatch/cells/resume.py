"""Where a requeued job may resume: on the GPU indices it had, on any node(s) where they are free.

A placed job carries a typed GPU gres (``gpu:g3:1,…``) that Slurm cannot re-type (it would grant the
old and the new GPUs together), so after a requeue it can only run on the same indices again: the
controller resumes requeued jobs this way, and the replay's prediction holds them back until it could
(``hivebatch.sim.indices``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence

from hivebatch.cells.types import GpuUse


def free_for(gpus: Mapping[int, GpuUse], idx: Sequence[int], vc: str, priority: int) -> bool:
    """Are the node's GPUs ``idx`` free for a job of ``vc`` at ``priority``?"""
    for i in idx:
        use = gpus.get(i)
        if use is None or use.bad or use.foreign or use.job is not None:
            return False
        if use.vc is not None and (priority < 0 or use.vc != vc):
            return False  # bound to another VC's cell (or to any cell: opportunistic work keeps off)
    return True


def take(
    gmap: Mapping[str, MutableMapping[int, GpuUse]],
    placement: Mapping[str, Sequence[int]],
    vc: str,
    job: str,
    opportunistic: bool = False,
) -> None:
    """Mark ``placement`` as ``job``'s in a GPU map, so the next job of the same round sees it taken."""
    for node, idx in placement.items():
        for i in idx:
            gmap[node][i] = GpuUse(vc=vc, job=job, opportunistic=opportunistic, bad=False, foreign=False)


def symmetric_indices(placement: Mapping[str, Sequence[int]]) -> list[int] | None:
    """The per-node index set when every node uses the same indices (Slurm's gres is per node)."""
    sets = {tuple(sorted(v)) for v in placement.values()}
    return list(next(iter(sets))) if len(sets) == 1 else None


def resume_nodes(
    gmap: Mapping[str, Mapping[int, GpuUse]],
    old: Sequence[str],
    idx: Sequence[int],
    vc: str,
    priority: int,
    eligible: Callable[[str], bool],
) -> list[str] | None:
    """As many nodes as ``old`` where the GPUs ``idx`` are free for the job, its old nodes first, then
    the others by name; None when there are too few."""
    order = sorted(old) + sorted(n for n in gmap if n not in old)
    chosen = [n for n in order if eligible(n) and free_for(gmap.get(n, {}), idx, vc, priority)][: len(old)]
    return chosen if len(chosen) == len(old) else None
