"""Requests, decisions and views exchanged with the cell allocator (plain dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hivebatch.errors import HivebatchError

OPPORTUNISTIC = -1


class UnknownJobError(HivebatchError, KeyError):
    """Release of a job the allocator does not know (never placed, or released twice)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown job"


class UnknownNodeError(HivebatchError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown node"


class UnknownVCError(HivebatchError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown VC"


@dataclass(frozen=True)
class Request:
    job_id: str
    vc: str
    gpus: int
    nodes: int | None = None  # d_node; None = the tightest shape
    gpu_type: str | None = None  # None = the first chain where the VC has room
    within: str | None = None  # a cell type that must contain the whole job
    priority: int = 0  # >= 0 guaranteed, -1 opportunistic
    # nodes this job must not use although their GPUs are fine: what else it needs (CPUs, memory,
    # partition, features) is not there, or Slurm did not start it there before
    avoid_nodes: frozenset[str] = frozenset()


@dataclass
class Decision:
    result: Literal["placed", "waiting", "rejected"]
    placement: dict[str, list[int]] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    reason: str | None = None  # waiting: what the job waits for, in plain words
    error: str | None = None  # rejected: what is wrong with the request
    gpu_type: str | None = None
    nodes: int | None = None  # the shape used (or that would be used)
    gpus_per_node: int | None = None
    # waiting: the victims it waits for were told to leave, and the last notice ends then (epoch s)
    leaving_until: float | None = None

    @property
    def placed(self) -> bool:
        return self.result == "placed"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"result": self.result}
        if self.result == "placed":
            out["placement"] = {n: sorted(ix) for n, ix in self.placement.items()}
            out["preempted"] = list(self.preempted)
        elif self.result == "waiting":
            out["reason"] = self.reason
        else:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class JobState:
    job_id: str
    vc: str
    priority: int
    placement: dict[str, list[int]]
    gpus: int
    gpu_type: str = ""

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0


@dataclass(frozen=True)
class GpuUse:
    vc: str | None  # VC whose cell holds the GPU (or the opportunistic job's VC)
    job: str | None
    opportunistic: bool
    bad: bool
    foreign: bool


@dataclass(frozen=True)
class CellTypeView:
    cell_type: str
    total: int  # cells of this type the VC is guaranteed
    bound: int  # bound to physical cells (a VC cell is bound exactly while a GPU in it is used)
    free: int  # not bound: available for new work
    unavailable: int  # free cells that no healthy physical cell can back right now
    gpus_per_cell: int


@dataclass(frozen=True)
class VCView:
    vc: str
    cells: dict[str, CellTypeView]
    gpus_total: int  # GPUs of all the VC's cells
    gpus_used: int  # by the VC's guaranteed jobs
    gpus_free: int  # total - used - those that cannot be backed or are bad
    capacity: int  # healthy capacity: total minus what bad hardware takes away
    reason: str | None  # why capacity < total, in plain words
    opportunistic_gpus: int = 0  # GPUs the VC's opportunistic jobs hold anywhere
    jobs: int = 0
