"""Plain rows the reports are computed from.

The report layer never touches the database or Slurm: ``hivebatch.reports.source`` turns DB records
(and the config) into these rows, and every computation takes rows in and returns dataclasses out,
so a report can be checked by hand on a handful of rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

GUARANTEED_CLASSES: tuple[str, ...] = ("urgent", "prior", "normal")
OPPORTUNISTIC = "opportunistic"

# Job states of the controller's state machine, grouped the way reports need them.
PENDING_STATES = frozenset({"queued", "held", "pending", "placed", "rejected"})
ACTIVE_STATES = frozenset({"running"})
FINISHED_STATES = frozenset({"done", "completed", "failed", "timeout"})
CANCELLED_STATES = frozenset({"cancelled", "canceled"})


@dataclass(frozen=True)
class JobRow:
    """One hivebatch job as the reports see it (times are timezone-aware UTC)."""

    job_id: str
    user: str
    vc: str
    qos: str  # urgent | prior | normal | opportunistic
    gpus: int
    state: str
    submit_time: datetime
    start_time: datetime | None = None  # first start
    end_time: datetime | None = None
    nodes: int = 1
    requested_nodes: int | None = None  # what the user asked for (-N); None when hivebatch chose the shape
    time_limit_s: float | None = None
    ect: datetime | None = None  # expected completion time: the QoS deadline
    gpu_type: str | None = None
    placement: dict[str, list[int]] = field(default_factory=dict)
    preemptions: int = 0
    name: str = ""
    reason: str | None = None
    slurm_job_id: int | None = None
    gpu_share: float = 1.0  # part of each GPU the job counts for: a slice's memory share, else 1

    @property
    def opportunistic(self) -> bool:
        return self.qos == OPPORTUNISTIC

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def pending(self) -> bool:
        # A preempted job is requeued: it waits again.
        return self.state in PENDING_STATES or self.state == "preempted"


@dataclass(frozen=True)
class RunSegment:
    """A stretch of time a job held GPUs; a preempted job has one segment per run."""

    job_id: str
    user: str
    vc: str
    gpus: float  # a GPU slice counts its share of the GPU
    start: datetime
    end: datetime | None  # None: still running
    opportunistic: bool = False
    preempted: bool = False  # the segment ended because the job was preempted (its work is lost)


@dataclass(frozen=True)
class EventRow:
    """One entry of the controller's audit trail."""

    time: datetime
    kind: str
    job_id: str | None = None
    message: str = ""
    vc: str | None = None
    user: str | None = None


def cells_text(cells: Mapping[str, int]) -> str:
    """A VC's cells as the reports and the audit trail write them: ``1×V100-NODE, 1×V100-SOCKET``."""
    return ", ".join(f"{n}×{t}" for t, n in cells.items()) or "-"


@dataclass(frozen=True)
class VCInfo:
    """A virtual cluster as configured: its cells per type and the GPUs they hold."""

    name: str
    cells: dict[str, int]
    gpus: int

    def cells_text(self) -> str:
        return cells_text(self.cells)


@dataclass(frozen=True)
class VCNow:
    """A VC at the controller's last cycle, from the cell core's view of it."""

    vc: str
    gpus_total: int
    gpus_used: int  # by its guaranteed jobs
    capacity: int  # healthy capacity: total minus what bad or outside-busy hardware takes away
    reason: str | None = None  # why capacity < total
