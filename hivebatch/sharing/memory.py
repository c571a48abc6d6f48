"""GPU memory as a schedulable quantity: sizes, and their mapping onto Slurm shards.

Slurm counts shared GPU use in shards, not bytes. hivebatch offers one shard per GiB of a GPU's memory
(the `shard:gN:k` lines `hadmin slurm-config` writes), so a slice is always reserved in whole GiB and
what the ledger books is exactly what Slurm enforces.
"""

from __future__ import annotations

import math
import re

from hivebatch.errors import HivebatchError

#: One Slurm shard stands for this much GPU memory; must match hivebatch.slurmconf.SHARD_MIB.
SHARD_MIB = 1024

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}


def parse_mem_mib(value: object, what: str = "GPU memory") -> int:
    """``8G`` → 8192, ``512M`` → 512, ``1.5G`` → 1536; a bare number is MiB."""
    if isinstance(value, bool):
        raise HivebatchError(f"{what} {value!r} is not a size like 8G or 8192M")
    if isinstance(value, int):
        mib = value
    elif isinstance(value, float):
        mib = math.ceil(value)
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise HivebatchError(f"{what} {value!r} is not a size like 8G or 8192M")
        mib = math.ceil(float(m.group(1)) * _SCALE[m.group(2).upper()])
    if mib <= 0:
        raise HivebatchError(f"{what} must be more than 0, got {value!r}")
    return mib


def format_mib(mib: int) -> str:
    """Short human form: whole GiB as ``8G``, else ``1.5G`` or ``700M``."""
    if mib % 1024 == 0:
        return f"{mib // 1024}G"
    if mib >= 1024:
        return f"{mib / 1024:.1f}G"
    return f"{mib}M"


def shards_for(mib: int, shard_mib: int = SHARD_MIB) -> int:
    """Shards a request of ``mib`` needs: rounded up, so the job never gets less than it asked."""
    if mib <= 0:
        raise ValueError("memory must be positive")
    return -(-mib // shard_mib)


def shard_rounded_mib(mib: int, shard_mib: int = SHARD_MIB) -> int:
    """The memory actually reserved for a request of ``mib``: whole shards."""
    return shards_for(mib, shard_mib) * shard_mib


def shards_per_gpu(gpu_mem_mib: int, shard_mib: int = SHARD_MIB) -> int:
    """Shards Slurm offers on one GPU (rounded down: a partial GiB is not offered)."""
    return gpu_mem_mib // shard_mib


def usable_mib(gpu_mem_mib: int, shard_mib: int = SHARD_MIB) -> int:
    """Memory of one GPU that slices can be booked against: the whole shards Slurm offers."""
    return shards_per_gpu(gpu_mem_mib, shard_mib) * shard_mib
