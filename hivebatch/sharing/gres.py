"""Slurm gres strings for slices: ``shard:g3:8`` pins 8 shards (8 GiB) of GPU 3 of the job's node."""

from __future__ import annotations


def slice_gres(gpu: int, shards: int) -> str:
    if gpu < 0 or shards < 1:
        raise ValueError("a slice needs a GPU index and at least one shard")
    return f"shard:g{gpu}:{shards}"


def parse_shard_gres(gres: str) -> dict[int, int]:
    """``shard:g3:8,shard:g5:2`` → {3: 8, 5: 2}; other gres items are ignored.

    Slurm's gres grammar is read in one place: the pure parser the Slurm backends use for a job's
    ``tres_per_node``, which reads these per-index shard types too.
    """
    from hivebatch.slurm.parse import typed_request  # pure text parsing: no Slurm command runs

    return typed_request(gres)[1]
