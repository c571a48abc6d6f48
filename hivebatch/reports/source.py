"""Read the controller's ledger into report rows (read only).

Run segments are rebuilt from the audit trail: a ``started`` event opens a run, ``preempted`` closes
it as lost work, a final event closes it. Where events are missing (a ledger imported from Slurm,
an old cycle), the job's own first start, current segment start and end time stand in, and the
GPU-hours the controller recorded as lost to preemption are laid out as one run before the last.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.reports.gpumap import FREE, GpuSlot
from hivebatch.reports.rows import EventRow, JobRow, RunSegment
from hivebatch.reports.timeutil import as_utc
from hivebatch.state.jobstates import FINAL_STATES
from hivebatch.userlimits import (
    HOLDING_STATES,
    STRICT_CLASSES,
    WINDOW,
    StrictRun,
    StrictUse,
    UsageKey,
    aware_utc,
    strict_usage,
)

if TYPE_CHECKING:
    from hivebatch.db.models import Event

START_KINDS = frozenset({"started", "running", "resumed"})
PREEMPT_KINDS = frozenset({"preempted", "requeued"})
END_KINDS = frozenset({"finished", "done", "failed", "cancelled", "completed", "timeout", "ended"})


def naive_utc(value: datetime) -> datetime:
    """The ledger stores naive UTC."""
    aware = as_utc(value)
    assert aware is not None
    return aware.replace(tzinfo=None)


_JOB_COLUMNS = (
    "id", "slurm_job_id", "name", "user", "account", "vc_name", "qos", "priority", "request", "gpus",
    "gpu_type", "state", "reason", "placement", "shape_nodes", "expected_completion", "submit_time",
    "start_time", "segment_start", "end_time", "preemptions", "gpu_hours_guaranteed",
    "gpu_hours_opportunistic", "gpu_hours_lost", "created_at", "gres", "foreign",
)  # fmt: skip


def _job_row(job: Any, gpu_share: float = 1.0) -> JobRow:
    """A JobRow from a Job (or a row with the same attribute names)."""
    request = job.request or {}
    limit = request.get("time_limit_s")
    nodes = job.shape_nodes or request.get("nodes") or (len(job.placement) if job.placement else 1)
    placement = {str(k): [int(i) for i in v] for k, v in (job.placement or {}).items()}
    submit = as_utc(job.submit_time) or as_utc(job.created_at)
    assert submit is not None
    return JobRow(
        job_id=str(job.slurm_job_id),
        user=job.user or "?",
        vc=job.vc_name or job.account or "?",
        qos=("opportunistic" if (job.priority or 0) < 0 else (job.qos or "normal")),
        gpus=job.gpus or 0,
        state=job.state,
        submit_time=submit,
        start_time=as_utc(job.start_time),
        end_time=as_utc(job.end_time),
        nodes=int(nodes),
        requested_nodes=int(request["nodes"]) if request.get("nodes") else None,
        time_limit_s=float(limit) if limit else None,
        ect=as_utc(job.expected_completion),
        gpu_type=job.gpu_type,
        placement=placement,
        preemptions=job.preemptions or 0,
        name=job.name or "",
        reason=job.reason,
        slurm_job_id=job.slurm_job_id,
        gpu_share=gpu_share,
    )


def load_jobs(
    session: Session, since: datetime | None = None, classes: Iterable[str] | None = None
) -> tuple[list[JobRow], list[RunSegment]]:
    """hivebatch jobs (foreign work excluded) alive at or after ``since``, and their run segments;
    with ``classes``, only the guaranteed jobs of those classes.

    Plain column selects, not ORM objects: a week of a large cluster is tens of thousands of jobs.
    """
    from hivebatch.db.models import Event, Job

    alive: list[Any] = [Job.foreign.is_(False)]
    if since is not None:
        alive.append((Job.end_time.is_(None)) | (Job.end_time >= naive_utc(since)))
    if classes is not None:
        alive += [Job.qos.in_(list(classes)), Job.priority >= 0]
    columns = [getattr(Job, name) for name in _JOB_COLUMNS]
    jobs: list[Any] = list(session.execute(select(*columns).where(*alive).order_by(Job.id)))
    events: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    if jobs:
        kinds = sorted(START_KINDS | PREEMPT_KINDS | END_KINDS)
        query = (
            select(Event.job_id, Event.time, Event.kind)
            .join(Job, Event.job_id == Job.id)
            .where(*alive, Event.kind.in_(kinds))
            .order_by(Event.job_id, Event.time, Event.id)
        )
        for job_id, time, kind in session.execute(query):
            stamp = as_utc(time)
            if stamp is not None and job_id is not None:
                events[job_id].append((stamp, kind))
    rows_out: list[JobRow] = []
    segments: list[RunSegment] = []
    from hivebatch.state.shares import gpu_share

    for job in jobs:
        # a GPU slice's share comes from its shards and the GPU memory load_report_data put in session.info
        row = _job_row(job, gpu_share(session, job))
        rows_out.append(row)
        booked = (job.gpu_hours_guaranteed or 0.0) + (job.gpu_hours_opportunistic or 0.0)
        segments.extend(
            job_segments(
                row, events.get(job.id, []), as_utc(job.segment_start), job.gpu_hours_lost or 0.0, booked
            )
        )
    return rows_out, segments


def ledger_strict_usage(session: Session, now: datetime) -> dict[UsageKey, StrictUse]:
    """Each user's use of the strict classes per VC, from the ledger's jobs of the 7 days up to ``now``."""
    jobs, segments = load_jobs(session, since=aware_utc(now) - WINDOW, classes=STRICT_CLASSES)
    by_id = {j.job_id: j for j in jobs}
    runs = [
        StrictRun(s.user, s.vc, by_id[s.job_id].qos, s.gpus, s.start, s.end)
        for s in segments
        if s.job_id in by_id
    ]
    holding = [(j.user, j.vc, j.qos) for j in jobs if j.state in HOLDING_STATES]
    return strict_usage(runs, holding, now)


def job_segments(
    row: JobRow,
    events: list[tuple[datetime, str]],
    segment_start: datetime | None = None,
    lost_gpu_hours: float = 0.0,
    booked_gpu_hours: float | None = None,
) -> list[RunSegment]:
    """The runs of one job, from its events when they tell, else from its own times and booked GPU-hours.

    ``booked_gpu_hours`` is what the controller booked for the job's finished runs (guaranteed plus
    opportunistic), ``lost_gpu_hours`` the part of it cut short by preemption.
    """

    def seg(start: datetime, end: datetime | None, preempted: bool = False) -> RunSegment:
        gpus = row.gpus * row.gpu_share
        return RunSegment(row.job_id, row.user, row.vc, gpus, start, end, row.opportunistic, preempted)

    out: list[RunSegment] = []
    open_at: datetime | None = None
    for time, kind in events:
        if kind in START_KINDS:
            if open_at is None:
                open_at = time
        elif (kind in PREEMPT_KINDS or kind in END_KINDS) and open_at is not None:
            out.append(seg(open_at, time, preempted=kind in PREEMPT_KINDS))
            open_at = None
    if out or open_at is not None:
        # Slurm's own start/end times are more exact than when the controller noticed them.
        if row.start_time is not None and out:
            out[0] = seg(min(row.start_time, out[0].start), out[0].end, out[0].preempted)
        if open_at is not None:
            end = row.end_time if row.state in FINAL_STATES else None
            out.append(seg(segment_start or open_at, end))
        elif row.state in FINAL_STATES and row.end_time is not None and not out[-1].preempted:
            out[-1] = seg(out[-1].start, row.end_time)
        return out
    if row.start_time is None:
        return []
    running = row.state in ("running", "placed")
    if booked_gpu_hours is None or not row.gpus:
        # Nothing booked to go by: one run from the first start.
        return [seg(row.start_time, row.end_time if row.state in FINAL_STATES else None)]
    if lost_gpu_hours > 0:
        out.append(
            seg(row.start_time, row.start_time + timedelta(hours=lost_gpu_hours / row.gpus), preempted=True)
        )
    kept = booked_gpu_hours - lost_gpu_hours
    if kept > 1e-9 and row.end_time is not None:
        out.append(seg(row.end_time - timedelta(hours=kept / row.gpus), row.end_time))
    elif row.state in FINAL_STATES and row.end_time is not None and booked_gpu_hours <= 1e-9:
        out.append(seg(row.start_time, row.end_time))
    if running:
        out.append(seg(segment_start or row.start_time, None))
    return out


def load_events(
    session: Session,
    job: str | None = None,
    since: datetime | None = None,
    kinds: list[str] | None = None,
    limit: int | None = None,
) -> list[EventRow]:
    from hivebatch.db.models import Event, Job

    query = select(Event, Job.user, Job.vc_name).outerjoin(Job, Event.job_id == Job.id)
    if job is not None:
        try:
            slurm_id = int(job)
        except ValueError:
            from hivebatch.errors import HivebatchError

            raise HivebatchError(f"--job wants a Slurm job id (a number), got {job!r}") from None
        query = query.where(Event.slurm_job_id == slurm_id)
    if since is not None:
        query = query.where(Event.time >= naive_utc(since))
    if kinds:
        query = query.where(Event.kind.in_(kinds))
    query = (
        query.order_by(Event.time.desc(), Event.id.desc()) if limit else query.order_by(Event.time, Event.id)
    )
    if limit:
        query = query.limit(limit)
    out: list[EventRow] = []
    for event, user, vc in session.execute(query):
        stamp = as_utc(event.time)
        assert stamp is not None
        out.append(
            EventRow(
                time=stamp,
                kind=event.kind,
                job_id=str(event.slurm_job_id) if event.slurm_job_id is not None else None,
                message=event.message,
                vc=vc or _event_vc(event),  # a VC's own event (its cells changed) names it in its data
                user=user,
            )
        )
    if limit:
        out.reverse()
    return out


def _event_vc(event: Event) -> str | None:
    vc = event.data.get("vc") if isinstance(event.data, dict) else None
    return vc if isinstance(vc, str) else None


def load_slots(session: Session) -> tuple[list[GpuSlot], datetime | None]:
    """The ledger's last picture of every GPU, and when it was taken: at the controller's last cycle,
    which rewrites only the GPUs that changed (a map quiet for an hour is still that cycle's)."""
    from hivebatch.db.models import CellSnapshot, GpuBinding, Job

    users = dict(session.execute(select(Job.slurm_job_id, Job.user)).all())
    slots: list[GpuSlot] = []
    newest: datetime | None = None
    for b in session.scalars(select(GpuBinding).order_by(GpuBinding.node, GpuBinding.gpu_index)):
        job = str(b.slurm_job_id) if b.slurm_job_id is not None else None
        slots.append(
            GpuSlot(
                node=b.node,
                index=b.gpu_index,
                kind=b.kind or FREE,
                vc=b.vc_name,
                job=job,
                user=users.get(b.slurm_job_id) if b.slurm_job_id is not None else None,
                bad=bool(b.bad),
            )
        )
        stamp = as_utc(b.updated_at)
        if stamp is not None and (newest is None or stamp > newest):
            newest = stamp
    snap = session.get(CellSnapshot, 1)
    cycle = as_utc(snap.taken_at) if snap is not None else None
    if cycle is not None and (newest is None or cycle > newest):
        newest = cycle
    return _with_shares(session, slots), newest


def _with_shares(session: Session, slots: list[GpuSlot]) -> list[GpuSlot]:
    """Mark GPUs shared by slices, from the sharing ledger the controller stores each cycle."""
    from dataclasses import replace

    from hivebatch.sharing import GpuShare, Slice
    from hivebatch.sharing.integration import describe_gpu
    from hivebatch.state.shares import get_state

    snap = get_state(session, "sharing") or {}
    shares: dict[tuple[str, int], GpuShare] = {}
    for raw in snap.get("gpus", []):
        try:
            g = GpuShare(**{k: v for k, v in raw.items() if k != "slices"})
            g.slices = {x["job_id"]: Slice(**x) for x in raw.get("slices", [])}
        except (TypeError, KeyError):  # written by another version: show the GPUs without their slices
            continue
        shares[(g.node, g.gpu)] = g
    if not shares:
        return slots
    out = []
    for slot in slots:
        held = shares.get((slot.node, slot.index))
        if held is not None and held.slices:
            slot = replace(
                slot,
                shared=max(slot.shared, len(held.slices)),
                share=describe_gpu(held),
                vc=slot.vc or held.vc,
            )
        out.append(slot)
    return out
