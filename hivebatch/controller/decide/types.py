"""What decide returns (places, victims, waits) and the working state its steps share."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from hivebatch.cells import CellAllocator, GpuUse
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide.tasks import TaskBuilder
from hivebatch.controller.ledger import Ledger
from hivebatch.db.models import Job
from hivebatch.qos import Task
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

GpuMap = dict[str, dict[int, GpuUse]]


@dataclass
class Place:
    job: Job
    placement: dict[str, list[int]]
    gres: str | None
    shape: tuple[int, int] | None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    ect: dt.datetime | None = None
    preempts: list[int] = field(default_factory=list)
    resumed: bool = False
    note: str | None = None  # said to the job's owner as its reason while it is placed


@dataclass
class Wait:
    job: Job
    reason: str
    rejected: bool = False
    shape: tuple[int, int] | None = None
    predicted_start: dt.datetime | None = None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    ect: dt.datetime | None = None
    latency_s: float | None = None
    reserved_start: dt.datetime | None = None  # the start its VC's backfill reservation promises


@dataclass
class Decisions:
    places: list[Place] = field(default_factory=list)
    victims: dict[int, int] = field(default_factory=dict)  # preempted slurm id -> slurm id taking its GPUs
    waits: list[Wait] = field(default_factory=list)


@dataclass
class Round:
    """One decide call: its inputs, the queue sorted by kind, and the decisions so far."""

    ctx: ControllerContext
    ledger: Ledger
    now: dt.datetime
    alloc: CellAllocator
    builder: TaskBuilder
    gmap: GpuMap  # the allocator's GPU map, kept current by the requeued jobs resumed this round
    out: Decisions = field(default_factory=Decisions)
    placed_now: dict[int, Place] = field(default_factory=dict)
    by_sid: dict[str, Job] = field(default_factory=dict)
    typed: list[tuple[Job, JobRequest]] = field(default_factory=list)  # requeued: keep their GPU indices
    slices: list[tuple[Job, JobRequest, SlurmJob]] = field(default_factory=list)
    untyped: list[tuple[Job, JobRequest, SlurmJob]] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)  # for the policy round
    reqs: dict[str, tuple[Job, JobRequest]] = field(default_factory=dict)  # task id -> its job

    @classmethod
    def start(cls, ctx: ControllerContext, ledger: Ledger, now: dt.datetime) -> Round:
        alloc = ledger.cells
        return cls(
            ctx=ctx,
            ledger=ledger,
            now=now,
            alloc=alloc,
            builder=TaskBuilder(ctx, now),
            gmap=alloc.gpu_map(),
            by_sid={str(j.slurm_job_id): j for j in ledger.jobs.values()},
        )

    def add_place(self, place: Place) -> None:
        self.out.places.append(place)
        self.placed_now[place.job.slurm_job_id] = place
