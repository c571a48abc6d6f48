"""Backfill reservations: the head job of a VC that cannot start now is promised a start time.

Jobs wait held in Slurm, so Slurm's own backfill never sees them; without this a large job of a VC
waits for ever behind a stream of small ones, each taking the GPUs another one freed. The rule is
EASY backfill on the cells:

* The *head* of a VC is its first guaranteed task, in the policy's order, that cannot be placed
  now (asked before anything is placed in the cycle: the controller resumes requeued jobs before its
  round and hands the round the cells as they were before that) — unless one of its guaranteed tasks has waited ``starve_after_s`` or longer: then the head is the
  one of those of the highest cell priority that arrived first. The policy's order alone does not
  prevent starvation: the QoS policy puts a task past its expected completion behind every task
  that can still meet its own, so under a steady stream of small jobs a large job that waited long
  would never be first again. A starving head that fits now starts before the VC's other tasks.
* Its *shadow time* is the earliest time it fits: on a scratch copy of the allocator the running
  jobs are released in order of their expected ends (predicted end, else time limit), and after
  each instant the head's request is tried again. Jobs whose end nobody knows are never released;
  a head that fits only after one of them gets no reservation.
* Any other task of the VC that may not preempt the head (a cell priority no higher than the
  head's), ranked before or after it, starts now only if it does not delay the head: either it ends
  (now + its predicted latency, else its time limit) by the shadow time, or, placed on a scratch
  copy, the head's shadow time stays the same.

The second test asks the cell core itself instead of comparing GPU sets: a VC's cells are bound to
physical cells only while used, so a small job on GPUs outside the head's predicted placement can
still take the last virtual cell the head needs. The walk's copy is kept as the state at the shadow
time (every job ending by then released); a candidate is adopted there on the GPUs it would take
and the head tried beside it, which is exact for the allocator's own rules (buddy cells, binding,
bad nodes) and costs one allocator copy per round, not per candidate.

VCs do not share cells, so only a VC's own tasks are checked against its reservation and the walk
releases only the VC's own jobs (all VCs of a round walk on one copy). With GPU-count quotas on a
shared pool (the simulator's quota mode) this ignores other VCs' jobs, so a head that needs them
to end gets no reservation. Opportunistic tasks are never checked: a guaranteed job preempts them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

#: a task waiting this long gets its VC's reservation whatever the policy's order (see the module doc)
DEFAULT_STARVE_AFTER_S = 12 * 3600.0

if TYPE_CHECKING:
    from hivebatch.cells import Request
    from hivebatch.scheduler import Placement


class Held(Protocol):
    """What the walk reads of a job an allocator holds."""

    @property
    def vc(self) -> str: ...


class Scratch(Protocol):
    """An allocator copy the walk may change at will."""

    def try_allocate(self, req: Request) -> Placement: ...
    def adopt(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> Placement: ...
    def release(self, job_id: str) -> None: ...
    def jobs(self) -> Mapping[str, Held]: ...


@runtime_checkable
class Forkable(Protocol):
    """An allocator that answers what-ifs and hands out scratch copies (the cell core, the quota pool)."""

    def try_allocate(self, req: Request) -> Placement: ...
    def fork(self) -> Scratch: ...


@dataclass(frozen=True)
class Shadow:
    """When the head fits at the earliest, and the GPUs it would get then."""

    start: float
    placement: dict[str, list[int]]


def shadow_time(scratch: Scratch, head: Request, ends: Mapping[str, float], now: float) -> Shadow | None:
    """Release the jobs of ``head``'s VC on ``scratch`` in order of ``ends`` until ``head`` fits; None
    if it never does. ``scratch`` is left as it is at that time, without the head.

    Only the head's VC's jobs are released: its cells are its own, and another VC's jobs on the same
    copy are left to that VC's walk. Jobs released at the same instant are released together before
    the head is tried again. An end already past (a job running late) counts as now: it may end any
    moment.
    """
    held = scratch.jobs()
    order = sorted(
        (max(now, e), j) for j, e in ends.items() if j in held and held[j].vc == head.vc and math.isfinite(e)
    )
    i = 0
    while i < len(order):
        t = order[i][0]
        while i < len(order) and order[i][0] == t:
            scratch.release(order[i][1])
            i += 1
        d = scratch.try_allocate(head)
        if d.result == "placed":
            return Shadow(t, {n: sorted(g) for n, g in d.placement.items()})
        if d.result == "rejected":
            return None
    return None


@dataclass
class Reservation:
    """The head of one VC, its shadow time, and the allocator as it will be then.

    ``then`` is the scratch copy the walk left: every job expected to end by the shadow time gone,
    the head not yet placed. A task admitted although it runs past the shadow time is added to it,
    so the next one is judged with it there.
    """

    job_id: str
    head: Request
    shadow: Shadow
    then: Scratch

    def admits(self, req: Request, placement: dict[str, list[int]], end: float) -> bool:
        """Whether ``req``, starting now on ``placement`` and running until ``end``, leaves the head
        its start: it ends by then, or the head still fits at the shadow time beside it."""
        if end <= self.shadow.start:
            return True  # gone before the head starts: the head sees the same free cells
        if self.then.adopt(req.job_id, req.vc, req.priority, placement).result != "placed":
            return False
        if self.then.try_allocate(self.head).result == "placed":
            return True
        self.then.release(req.job_id)
        return False

    def reason(self) -> str:
        """The head's waiting reason, as ``hq`` shows it."""
        return f"reserved: starts by {clock(self.shadow.start)} on {where(self.shadow.placement)}"

    def refusal(self) -> str:
        """Why another task of the VC waits. Without the start time: a reason that moved with every
        running job's prediction would be a new event for each waiting job every cycle."""
        return f"would delay job {self.job_id}, which holds its VC's reservation"


def clock(t: float) -> str:
    """Epoch seconds as Slurm writes times (UTC)."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    except (OverflowError, OSError, ValueError):  # past any date the platform writes
        return f"{t:.0f} s after the epoch"


def where(placement: Mapping[str, list[int]]) -> str:
    """``node[gpu,gpu] node[gpu]``: the GPUs a placement takes, node by node."""
    return " ".join(f"{n}[{','.join(str(g) for g in gpus)}]" for n, gpus in placement.items())


def reserve(
    then: Scratch, head: Request, ends: Mapping[str, float], now: float, job_id: str
) -> Reservation | None:
    """``head``'s reservation, walked on the allocator copy ``then`` (None: no start can be told)."""
    found = shadow_time(then, head, ends, now)
    return Reservation(job_id, head, found, then) if found is not None else None
