"""GPU sharing: fractional GPUs by memory (binpacked slices) and opportunistic co-location.

Pure: no DB, subprocess, click or rich. The cell core owns whole GPUs; :class:`SharingLedger` books
memory slices on top of it.
"""

from hivebatch.sharing.accounting import GpuHours, GpuUse, SharingAccount, account
from hivebatch.sharing.binpack import choose_binpack, fitting, node_fits
from hivebatch.sharing.config import ColocateConfig, SharingConfig, parse_sharing_config
from hivebatch.sharing.env import job_environment, sbatch_export_arg
from hivebatch.sharing.gres import parse_shard_gres, slice_gres
from hivebatch.sharing.ledger import SharingLedger
from hivebatch.sharing.memory import (
    SHARD_MIB,
    format_mib,
    parse_mem_mib,
    shard_rounded_mib,
    shards_for,
    shards_per_gpu,
)
from hivebatch.sharing.slices import GpuShare, Slice, SliceDecision, is_synthetic, slice_label

__all__ = [
    "SHARD_MIB",
    "ColocateConfig",
    "GpuHours",
    "GpuShare",
    "GpuUse",
    "SharingAccount",
    "SharingConfig",
    "SharingLedger",
    "Slice",
    "SliceDecision",
    "account",
    "choose_binpack",
    "fitting",
    "format_mib",
    "is_synthetic",
    "job_environment",
    "node_fits",
    "parse_mem_mib",
    "parse_shard_gres",
    "parse_sharing_config",
    "sbatch_export_arg",
    "shard_rounded_mib",
    "shards_for",
    "shards_per_gpu",
    "slice_gres",
    "slice_label",
]
