"""The GRES a placement becomes in Slurm: typed per index, or a plain count where Slurm has no choice."""

from __future__ import annotations


def gres_for(indices: list[int]) -> str:
    """Typed per-index gres: each GPU index is its own GRES type g<i> (see hadmin slurm-config)."""
    return ",".join(f"gpu:g{i}:1" for i in sorted(indices))


def untyped_gres(per_node: int) -> str:
    """A plain GPU count per node (``gpu:2``): Slurm picks the GPUs among those free on the node."""
    return f"gpu:{per_node}"


def untyped_count(gres: str | None) -> int | None:
    """The per-node count of an untyped GPU gres (``gpu:2`` → 2); None for typed, shard or no gres."""
    parts = str(gres or "").split(":")
    if len(parts) == 2 and parts[0] == "gpu" and parts[1].isdigit():
        return int(parts[1])
    return None
