"""Slurm gres strings for slices: ``shard:g3:8`` pins 8 shards (8 GiB) of GPU 3 of the job's node."""

from __future__ import annotations

import re

from hivebatch.sharing.memory import SHARD_MIB

_SHARD = re.compile(r"^shard:g(\d+):(\d+)$")


def slice_gres(gpu: int, shards: int) -> str:
    if gpu < 0 or shards < 1:
        raise ValueError("a slice needs a GPU index and at least one shard")
    return f"shard:g{gpu}:{shards}"


def parse_shard_gres(gres: str) -> dict[int, int]:
    """``shard:g3:8,shard:g5:2`` → {3: 8, 5: 2}; other gres items are ignored."""
    out: dict[int, int] = {}
    for item in gres.split(","):
        m = _SHARD.match(item.strip())
        if m:
            out[int(m.group(1))] = out.get(int(m.group(1)), 0) + int(m.group(2))
    return out


def shards_to_mib(shards: int) -> int:
    return shards * SHARD_MIB
