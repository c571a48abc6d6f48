"""The typed per-index GRES a placement becomes in Slurm."""

from __future__ import annotations


def gres_for(indices: list[int]) -> str:
    """Typed per-index gres: each GPU index is its own GRES type g<i> (see hadmin slurm-config)."""
    return ",".join(f"gpu:g{i}:1" for i in sorted(indices))


def symmetric_indices(placement: dict[str, list[int]]) -> list[int] | None:
    """The per-node index set when every node uses the same indices (Slurm's gres is per node)."""
    sets = {tuple(sorted(v)) for v in placement.values()}
    return list(next(iter(sets))) if len(sets) == 1 else None
