"""Backfill reservations: the head job of a VC that cannot start now is promised a start time.

Jobs wait held in Slurm, so Slurm's own backfill never sees them; without this a large job of a VC
waits for ever behind a stream of small ones, each taking the GPUs another one freed. The rule is
EASY backfill on the cells:

* The *head* of a VC is its first guaranteed task, in the policy's order, that cannot be placed —
  unless one of its guaranteed tasks has waited ``starve_after_s`` or longer: then the head is the
  one of those of the highest cell priority that arrived first. The policy's order alone does not
  prevent starvation: the QoS policy puts a task past its expected completion behind every task
  that can still meet its own, so under a steady stream of small jobs a large job that waited long
  would never be first again. A starving head that fits now starts before the VC's other tasks.
* Its *shadow time* is the earliest time it fits: on a scratch copy of the allocator the running
  jobs are released in order of their expected ends (predicted end, else time limit), and after
  each instant the head's request is tried again. Jobs whose end nobody knows are never released;
  a head that fits only after one of them gets no reservation.
* Any other task of the VC that may not preempt the head (a cell priority no higher than the
  head's) starts now only if it does not delay the head: either it ends
  (now + its predicted latency, else its time limit) by the shadow time, or, placed on a scratch
  copy, the head's shadow time stays the same.

The second test asks the cell core itself instead of comparing GPU sets: a VC's cells are bound to
physical cells only while used, so a small job on GPUs outside the head's predicted placement can
still take the last virtual cell the head needs. Re-running the walk with the candidate placed is
exact for the allocator's own rules (buddy cells, binding, bad nodes) and costs one allocator copy.

VCs do not share cells, so only a VC's own tasks are checked against its reservation; opportunistic
tasks never are: a guaranteed job preempts them when it starts.
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


class Scratch(Protocol):
    """An allocator copy the walk may change at will."""

    def allocate(self, req: Request) -> Placement: ...
    def try_allocate(self, req: Request) -> Placement: ...
    def release(self, job_id: str) -> None: ...
    def jobs(self) -> Mapping[str, object]: ...


@runtime_checkable
class Forkable(Protocol):
    """An allocator that can hand out a scratch copy of itself (the cell core, the quota pool)."""

    def fork(self) -> Scratch: ...


@dataclass(frozen=True)
class Shadow:
    """When the head fits at the earliest, and the GPUs it would get then."""

    start: float
    placement: dict[str, list[int]]


def shadow_time(scratch: Scratch, head: Request, ends: Mapping[str, float], now: float) -> Shadow | None:
    """Release ``scratch``'s jobs in order of ``ends`` until ``head`` fits; None if it never does.

    Jobs released at the same instant are released together before the head is tried again. An end
    already past (a job running late) counts as now: it may end any moment.
    """
    held = scratch.jobs()
    order = sorted((max(now, e), j) for j, e in ends.items() if j in held and math.isfinite(e))
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


@dataclass(frozen=True)
class Reservation:
    """The head of one VC, its shadow time and the GPUs it is expected to take then."""

    job_id: str
    head: Request
    shadow: Shadow

    def admits(
        self, alloc: Forkable, req: Request, end: float, ends: Mapping[str, float], now: float
    ) -> bool:
        """Whether ``req``, running until ``end``, can start now without delaying the head.

        A request that does not fit at all delays nothing: the allocator itself says why it waits.
        """
        if end <= self.shadow.start:
            return True  # gone before the head starts: the head sees the same free cells
        scratch = alloc.fork()
        if scratch.allocate(req).result != "placed":
            return True
        later = shadow_time(scratch, self.head, {**ends, req.job_id: end}, now)
        return later is not None and later.start <= self.shadow.start

    def reason(self) -> str:
        """The head's waiting reason, as ``hq`` shows it."""
        return f"reserved: starts by {clock(self.shadow.start)} on {where(self.shadow.placement)}"

    def refusal(self) -> str:
        """Why a later task of the VC waits."""
        return f"would delay job {self.job_id}, reserved to start by {clock(self.shadow.start)}"


def clock(t: float) -> str:
    """Epoch seconds as Slurm writes times (UTC)."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    except (OverflowError, OSError, ValueError):  # past any date the platform writes
        return f"{t:.0f} s after the epoch"


def where(placement: Mapping[str, list[int]]) -> str:
    """``node[gpu,gpu] node[gpu]``: the GPUs a placement takes, node by node."""
    return " ".join(f"{n}[{','.join(str(g) for g in gpus)}]" for n, gpus in placement.items())
