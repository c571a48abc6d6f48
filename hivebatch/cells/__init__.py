"""Cells, virtual clusters and buddy cell allocation (HiveD): pure Python, no I/O."""

from hivebatch.cells.capacity import check_feasibility
from hivebatch.cells.config import parse_cluster_config, parse_memory_mib
from hivebatch.cells.spec import (
    CellType,
    ChainSpec,
    ClusterSpec,
    InfeasibleConfigError,
    NodeSpec,
    PhysicalCellSpec,
    VCSpec,
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
