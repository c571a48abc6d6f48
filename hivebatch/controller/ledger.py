"""The cycle's working set, shared by reconcile, decide and act."""

from __future__ import annotations

from dataclasses import dataclass, field

from hivebatch.cells import CellAllocator
from hivebatch.db.models import Job
from hivebatch.sharing.ledger import SharingLedger
from hivebatch.slurm.types import SlurmJob, SlurmNode
from hivebatch.userlimits import StrictUse, UsageKey


@dataclass
class Ledger:
    """Ledger rows of unfinished jobs, their Slurm records, the rebuilt allocator.

    ``alloc`` and ``sharing`` are filled in by ``rebuild_allocator``; until then ``alloc`` is None.
    """

    jobs: dict[int, Job]
    slurm: dict[int, SlurmJob]
    alloc: CellAllocator | None = None
    redo_place: list[Job] = field(default_factory=list)  # intent "place", Slurm job still held: act again
    redo_preempt: list[Job] = field(default_factory=list)  # intent "preempt", Slurm job still running
    redo_notice: list[Job] = field(default_factory=list)  # intent "notice", signal maybe not sent yet
    bad_nodes: set[str] = field(default_factory=set)
    nodes: dict[str, SlurmNode] = field(default_factory=dict)  # as Slurm listed them this cycle
    licenses: dict[str, int] | None = None  # each license's free count (None: no job asks for one)
    # per Slurm job id: nodes where the job was pinned and Slurm did not start it (see take_back)
    avoided: dict[int, frozenset[str]] = field(default_factory=dict)
    sharing: SharingLedger | None = None  # GPU slices booked on top of ``alloc``
    #: each user's use of the strict classes (filled only when the config limits them)
    strict_use: dict[UsageKey, StrictUse] = field(default_factory=dict)
    usage: dict[str, float] | None = None  # user -> recent decayed GPU-hours; None: no fairshare

    @property
    def cells(self) -> CellAllocator:
        """The rebuilt allocator (decide and act run only after ``rebuild_allocator``)."""
        if self.alloc is None:
            raise RuntimeError("the cell allocator is used before reconcile rebuilt it")
        return self.alloc
