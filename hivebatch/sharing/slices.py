"""What the sharing ledger books: slices, shared GPUs and decisions, and what it needs of the cell core.

The cell core knows whole GPUs only. A GPU that carries slices is held in it by a synthetic job:
``share:node2:3`` (bound to a VC as a leaf cell while guaranteed slices of that VC use it) or
``share-opp:node2:3`` (a free GPU taken, as an opportunistic cell, by opportunistic slices).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hivebatch.sharing.memory import SHARD_MIB, format_mib

if TYPE_CHECKING:
    from hivebatch.cells.types import GpuUse, JobState
    from hivebatch.scheduler import Placement  # what the ledger reads of a cell decision

SHARE_PREFIX = "share:"
OPP_PREFIX = "share-opp:"
KIND_SHARE = "share"  # bound to a VC for guaranteed slices
KIND_OPP = "opp"  # opportunistic cell holding opportunistic slices
KIND_WHOLE = "whole"  # held by a guaranteed whole-GPU job that lets others use what it leaves


class Allocator(Protocol):
    """What the ledger needs of hivebatch.cells.CellAllocator; requests are built by the ledger's
    request factory (hivebatch.cells.Request by default)."""

    def allocate(self, req: Any) -> Placement: ...
    def try_allocate(self, req: Any) -> Placement: ...
    def release(self, job_id: str) -> object: ...
    def adopt(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> Placement: ...
    def jobs(self) -> Mapping[str, JobState]: ...
    def gpu_map(self) -> Mapping[str, Mapping[int, GpuUse]]: ...


def is_synthetic(job_id: str) -> bool:
    return job_id.startswith(SHARE_PREFIX) or job_id.startswith(OPP_PREFIX)


def cell_id(prefix: str, node: str, gpu: int) -> str:
    return f"{prefix}{node}:{gpu}"


@dataclass
class Slice:
    job_id: str
    vc: str
    node: str
    gpu: int
    mem_mib: int  # reserved, in whole shards
    priority: int

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0

    @property
    def shards(self) -> int:
        return self.mem_mib // SHARD_MIB

    @property
    def gres(self) -> str:
        return f"shard:g{self.gpu}:{self.shards}"


@dataclass
class GpuShare:
    """One GPU that carries slices or may carry them."""

    node: str
    gpu: int
    capacity_mib: int
    kind: str
    holder: str  # synthetic cell id, or the whole job's id
    vc: str | None
    priority: int  # the holder's priority in the cell core
    reserve_mib: int = 0  # memory a whole-GPU holder keeps
    slices: dict[str, Slice] = field(default_factory=dict)

    @property
    def guaranteed_mib(self) -> int:
        return self.reserve_mib + sum(s.mem_mib for s in self.slices.values() if not s.opportunistic)

    @property
    def opportunistic_mib(self) -> int:
        return sum(s.mem_mib for s in self.slices.values() if s.opportunistic)

    @property
    def free_mib(self) -> int:
        return self.capacity_mib - self.guaranteed_mib - self.opportunistic_mib

    def opp_slices(self) -> list[Slice]:
        return [s for s in self.slices.values() if s.opportunistic]


@dataclass
class SliceDecision:
    job_id: str
    result: str  # placed | waiting | rejected
    node: str | None = None
    gpu: int | None = None
    mem_mib: int = 0
    capacity_mib: int = 0
    preempted: list[str] = field(default_factory=list)
    colocated: bool = False  # on a GPU whose guaranteed holder leaves it idle in part
    reason: str | None = None
    error: str | None = None

    @property
    def shards(self) -> int:
        return self.mem_mib // SHARD_MIB

    @property
    def gres(self) -> str | None:
        return None if self.gpu is None else f"shard:g{self.gpu}:{self.shards}"

    @property
    def placement(self) -> dict[str, list[int]]:
        return {} if self.node is None or self.gpu is None else {self.node: [self.gpu]}

    def describe(self) -> str:
        if self.node is None or self.gpu is None:
            return "-"
        return slice_label(self.node, self.gpu, self.mem_mib, self.capacity_mib)


def slice_label(node: str, gpu: int, mem_mib: int, capacity_mib: int) -> str:
    """How hq shows a slice: ``node2:[3] 8G/32G``."""
    return f"{node}:[{gpu}] {format_mib(mem_mib)}/{format_mib(capacity_mib)}"
