"""The typed per-index GRES a placement becomes in Slurm."""

from __future__ import annotations


def gres_for(indices: list[int]) -> str:
    """Typed per-index gres: each GPU index is its own GRES type g<i> (see hadmin slurm-config)."""
    return ",".join(f"gpu:g{i}:1" for i in sorted(indices))
