"""The hivebatch ledger: SQLAlchemy 2.0 models.

The controller is the only writer; ``hq`` and ``hadmin`` read. Times are stored as naive UTC
datetimes (SQLite has no time zones; PostgreSQL columns are ``timestamp without time zone``), and
every helper in this package converts at the boundary.

Job states (``Job.state``)::

    queued ──► placed ──► running ──► done | failed | cancelled
       ▲          │           │
       │          └───────────┴──► preempted ──► (re-placed: placed ──► running …)
       └── rejected (request invalid now, e.g. unknown VC; the job stays held with a reason and is
                     looked at again every cycle, so fixing the config is enough)

``Job.intent`` marks a Slurm action the controller committed to *before* running it ("place",
"preempt", or "notice": signal a victim that it must leave); the next cycle finishes or checks it
against Slurm, which makes a killed controller safe. A running job with ``notice_until`` set has been
told to leave: it keeps its GPUs until it does, or until that time, when it is requeued and held.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# re-exported: models and migrations name the job states from here
from hivebatch.state.jobstates import ACTIVE_STATES as ACTIVE_STATES
from hivebatch.state.jobstates import FINAL_STATES as FINAL_STATES
from hivebatch.state.jobstates import JOB_STATES as JOB_STATES
from hivebatch.state.jobstates import WAITING_STATES as WAITING_STATES

# Stable constraint names so Alembic migrations (and downgrades) are identical on SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

INTENTS = ("place", "preempt", "notice")
GPU_KINDS = ("free", "guaranteed", "opportunistic", "foreign")


def utcnow() -> dt.datetime:
    """Naive UTC now, the form every time column holds."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class VirtualCluster(Base):
    """A VC (a Slurm account) as last read from the config by the controller."""

    __tablename__ = "vcs"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer, default=0)  # GPUs its cells hold, all types
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    cells: Mapped[list[VCCell]] = relationship(
        back_populates="vc", cascade="all, delete-orphan", order_by="VCCell.cell_type"
    )


class VCCell(Base):
    """How many cells of one type a VC owns (its private-cluster view)."""

    __tablename__ = "vc_cells"
    __table_args__ = (UniqueConstraint("vc_name", "cell_type"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    vc_name: Mapped[str] = mapped_column(ForeignKey("vcs.name", ondelete="CASCADE"), index=True)
    cell_type: Mapped[str] = mapped_column(String(64))
    count: Mapped[int] = mapped_column(Integer)
    vc: Mapped[VirtualCluster] = relationship(back_populates="cells")


class GpuBinding(Base):
    """One physical GPU as the cell allocator saw it at the end of the last cycle.

    This is the physical-cell binding readers need (``hq vc``, ``hadmin cluster``): which VC holds
    the leaf cell, which job uses it, whether the work is opportunistic or foreign, whether the node
    is bad. The full allocator state is in ``CellSnapshot``.
    """

    __tablename__ = "gpu_bindings"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_type: Mapped[str | None] = mapped_column(String(64))
    vc_name: Mapped[str | None] = mapped_column(String(64))
    slurm_job_id: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16), default="free")  # one of GPU_KINDS
    bad: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class CellSnapshot(Base):
    """The cell allocator's ``snapshot()`` after the last cycle (one row, id 1).

    The controller rebuilds its allocator from the job ledger each cycle; this copy is for readers
    (``CellAllocator.restore(spec, data)`` gives them VC views without touching Slurm).
    """

    __tablename__ = "cell_snapshots"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    taken_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class Job(Base):
    """A Slurm job hivebatch knows about: submitted through hsub, or foreign work using GPUs."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_state_vc", "state", "vc_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slurm_job_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    # Slurm takes names of any length (1,000 characters on the lab)
    name: Mapped[str | None] = mapped_column(Text)
    user: Mapped[str | None] = mapped_column(String(64), index=True)
    account: Mapped[str | None] = mapped_column(String(64))  # Slurm account; equals the VC for hsub jobs
    vc_name: Mapped[str | None] = mapped_column(String(64), index=True)
    qos: Mapped[str | None] = mapped_column(String(32))  # class: urgent | prior | normal | opportunistic
    priority: Mapped[int] = mapped_column(Integer, default=0)  # cell-core priority (-1 opportunistic)
    foreign: Mapped[bool] = mapped_column(Boolean, default=False)  # not from hsub, but uses GPUs
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # JobRequest fields
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_type: Mapped[str | None] = mapped_column(String(64))

    state: Mapped[str] = mapped_column(String(16), default="queued")  # one of JOB_STATES
    intent: Mapped[str | None] = mapped_column(String(16))  # one of INTENTS, set before acting
    reason: Mapped[str | None] = mapped_column(Text)  # plain words: why pending / rejected / ended

    # node -> sorted GPU indices; kept after the job ends (history), and after a requeue (its typed gres)
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    gres: Mapped[str | None] = mapped_column(String(512))  # typed gres set on the Slurm job, never re-typed
    shape_nodes: Mapped[int | None] = mapped_column(Integer)
    shape_gpn: Mapped[int | None] = mapped_column(Integer)

    predicted_start: Mapped[dt.datetime | None] = mapped_column(DateTime)
    predicted_end: Mapped[dt.datetime | None] = mapped_column(DateTime)
    expected_completion: Mapped[dt.datetime | None] = mapped_column(DateTime)  # the class's ECT
    slack_s: Mapped[float | None] = mapped_column(Float)
    latency_s: Mapped[float | None] = mapped_column(Float)  # predicted run time on its (chosen) shape
    meets_qos: Mapped[bool | None] = mapped_column(Boolean)

    submit_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    placed_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    start_time: Mapped[dt.datetime | None] = mapped_column(DateTime)  # first start
    segment_start: Mapped[dt.datetime | None] = mapped_column(DateTime)  # start of the current run
    end_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    exit_code: Mapped[str | None] = mapped_column(String(32))
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    # a preemption notice: the job was signalled and is requeued and held at this time at the latest
    notice_until: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # the Slurm job it was told to leave its GPUs for, until it is placed again
    notice_by: Mapped[int | None] = mapped_column(Integer)
    # the start time its owner set while it waited (scontrol update StartTime=...), a past time for
    # "now"; None: the --begin the plugin recorded at submit. Their hold and release replace Slurm's
    # begin time with the plugin's marks, and the controller gives this one back.
    owner_begin: Mapped[dt.datetime | None] = mapped_column(DateTime)

    gpu_hours_guaranteed: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_hours_opportunistic: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_hours_lost: Mapped[float] = mapped_column(Float, default=0.0)  # runs cut short by preemption

    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)

    events: Mapped[list[Event]] = relationship(back_populates="job", order_by="Event.id")

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0


class Event(Base):
    """The audit trail: one row per controller decision or observed change."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    slurm_job_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    # e.g. submitted, placed, started, finished, preempted, rejected, waiting, foreign, node_bad, ...
    kind: Mapped[str] = mapped_column(String(32), index=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    job: Mapped[Job | None] = relationship(back_populates="events")


class Profile(Base):
    """Performance-model coefficients of one model type on one GPU type."""

    __tablename__ = "profiles"
    __table_args__ = (UniqueConstraint("model", "gpu_type"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model: Mapped[str] = mapped_column(String(64))
    gpu_type: Mapped[str] = mapped_column(String(64))
    family: Mapped[str | None] = mapped_column(String(64))
    coefficients: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str | None] = mapped_column(String(256))  # shipped, fitted from FILE, measured …
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


class GpuUsage(Base):
    """GPU-seconds one physical GPU gave to guaranteed, opportunistic and foreign work on one UTC day."""

    __tablename__ = "gpu_usage"
    __table_args__ = (UniqueConstraint("node", "gpu_index", "day", "vc_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(128))
    gpu_index: Mapped[int] = mapped_column(Integer)
    day: Mapped[dt.date] = mapped_column(Date, index=True)
    vc_name: Mapped[str] = mapped_column(String(64), default="")  # the job's VC; "" for foreign work
    guaranteed_s: Mapped[float] = mapped_column(Float, default=0.0)
    opportunistic_s: Mapped[float] = mapped_column(Float, default=0.0)
    foreign_s: Mapped[float] = mapped_column(Float, default=0.0)


class ControllerState(Base):
    """Small key/value facts the controller keeps between cycles (last cycle time, …)."""

    __tablename__ = "controller_state"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


class ControllerLease(Base):
    """Who runs the controller on this database, until when (one row; see controller/lease.py).

    The exclusivity lives in the database so that any two controllers sharing it exclude each other,
    whatever host or config file they run from."""

    __tablename__ = "controller_lease"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    token: Mapped[str] = mapped_column(String(64))
    holder_host: Mapped[str] = mapped_column(String(255))
    holder_pid: Mapped[int] = mapped_column(Integer)
    acquired_at: Mapped[dt.datetime] = mapped_column(DateTime)
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime)
