"""What a Slurm job record says about the GPUs it holds, in the ledger's terms."""

from __future__ import annotations

from hivebatch.slurm.types import SlurmJob


def gpus_of(sj: SlurmJob) -> dict[str, list[int]]:
    """{node: [GPU index, …]} of the whole GPUs Slurm granted the job."""
    return {node: sorted(int(i) for i in idx) for node, idx in (sj.gpus or {}).items() if idx}


def shard_placement(sj: SlurmJob) -> tuple[dict[str, list[int]] | None, str | None]:
    """Where a running shard job is, from Slurm alone: ({node: [gpu], …}, "shard:gN:k") — one GPU per
    node with the same index and shard count on every node (Slurm's gres is per node)."""
    held = [(n, g, c) for n, per in (sj.shards or {}).items() for g, c in per.items() if c]
    nodes = {n for n, _g, _c in held}
    if not held or len(nodes) != len(held) or len({(g, c) for _n, g, c in held}) != 1:
        return None, None
    _node, gpu, count = held[0]
    return {n: [int(gpu)] for n in sorted(nodes)}, f"shard:g{int(gpu)}:{int(count)}"
