"""Cells, virtual clusters and buddy cell allocation (HiveD): pure Python, no I/O."""

from hivebatch.cells.config import (
    CellType,
    ChainSpec,
    ClusterSpec,
    InfeasibleConfigError,
    NodeSpec,
    PhysicalCellSpec,
    VCSpec,
    check_feasibility,
    parse_cluster_config,
    parse_memory_mib,
)

__all__ = [
    "CellType",
    "ChainSpec",
    "ClusterSpec",
    "InfeasibleConfigError",
    "NodeSpec",
    "PhysicalCellSpec",
    "VCSpec",
    "check_feasibility",
    "parse_cluster_config",
    "parse_memory_mib",
]

from hivebatch.cells.allocator import CellAllocator  # noqa: E402
from hivebatch.cells.types import (  # noqa: E402
    OPPORTUNISTIC,
    CellTypeView,
    Decision,
    GpuUse,
    JobState,
    Request,
    UnknownJobError,
    UnknownNodeError,
    UnknownVCError,
    VCView,
)

__all__ += [
    "OPPORTUNISTIC",
    "CellAllocator",
    "CellTypeView",
    "Decision",
    "GpuUse",
    "JobState",
    "Request",
    "UnknownJobError",
    "UnknownNodeError",
    "UnknownVCError",
    "VCView",
]
