"""Step 5 and the helpers every step uses: events (one log line each), GPU-hour accounting, the GPU map."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.db.models import CellSnapshot, ControllerState, Event, GpuBinding, GpuUsage, Job
from hivebatch.request import JobRequest
from hivebatch.state.shares import gpu_share

if TYPE_CHECKING:
    from hivebatch.cells import CellAllocator, ClusterSpec

log = logging.getLogger("hivebatch.controller")
#: what a controller-state row holds: a JSON document
Json = dict[str, Any] | list[Any] | str | int | float | bool | None


class Recorder:
    """Adds an Event row and logs one line for every decision or observed change."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.counts: Counter[str] = Counter()

    def event(
        self,
        session: Session,
        job: Job | None,
        kind: str,
        message: str,
        data: dict[str, Any] | None = None,
        slurm_job_id: int | None = None,
    ) -> None:
        sid = job.slurm_job_id if job is not None else slurm_job_id
        session.add(
            Event(
                time=self.now,
                job_id=job.id if job is not None else None,
                slurm_job_id=sid,
                kind=kind,
                message=message,
                data=data,
            )
        )
        self.counts[kind] += 1
        who = f"job {sid}" if sid is not None else "cluster"
        log.info("%s %s: %s", kind, who, message)


def placement_text(placement: dict[str, list[int]] | None) -> str:
    if not placement:
        return "-"
    return " ".join(f"{node}:[{','.join(str(i) for i in idx)}]" for node, idx in sorted(placement.items()))


def _day_slices(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.date, float]]:
    """Seconds of [start, end) falling on each UTC day."""
    out: list[tuple[dt.date, float]] = []
    cur = start
    while cur < end:
        nxt = min(end, dt.datetime.combine(cur.date() + dt.timedelta(days=1), dt.time()))
        out.append((cur.date(), (nxt - cur).total_seconds()))
        cur = nxt
    return out


def account_run(session: Session, job: Job, end: dt.datetime | None, preempted: bool = False) -> float:
    """Book the run that just ended (segment_start → end) as GPU-hours on the job and GPU-seconds per GPU.

    Returns the GPU-hours booked. Idempotent: the segment is cleared once booked.
    """
    start = job.segment_start
    if start is None or end is None or end <= start or not job.placement:
        job.segment_start = None
        return 0.0
    seconds = (end - start).total_seconds()
    share = gpu_share(session, job)
    ngpus = sum(len(v) for v in job.placement.values()) * share
    hours = seconds * ngpus / 3600.0
    if job.foreign:
        column = "foreign_s"
    elif job.priority < 0:
        column = "opportunistic_s"
        job.gpu_hours_opportunistic = (job.gpu_hours_opportunistic or 0.0) + hours
    else:
        column = "guaranteed_s"
        job.gpu_hours_guaranteed = (job.gpu_hours_guaranteed or 0.0) + hours
    if preempted:
        job.gpu_hours_lost = (job.gpu_hours_lost or 0.0) + hours
    vc = "" if job.foreign else (job.vc_name or "")
    for day, secs in _day_slices(start, end):
        for node, indices in job.placement.items():
            for idx in indices:
                row = session.scalars(
                    select(GpuUsage).where(
                        GpuUsage.node == node,
                        GpuUsage.gpu_index == idx,
                        GpuUsage.day == day,
                        GpuUsage.vc_name == vc,
                    )
                ).first()
                if row is None:
                    row = GpuUsage(
                        node=node,
                        gpu_index=idx,
                        day=day,
                        vc_name=vc,
                        guaranteed_s=0.0,
                        opportunistic_s=0.0,
                        foreign_s=0.0,
                    )
                    session.add(row)
                setattr(row, column, (getattr(row, column) or 0.0) + secs * share)
    job.segment_start = None
    return hours


def _job_id_of(tag: str | None) -> int | None:
    """Slurm job id in an allocator job name ("1234") or foreign tag ("slurm:1234@node1")."""
    if not tag:
        return None
    text = tag.split(":", 1)[1] if tag.startswith("slurm:") else tag
    text = text.split("@", 1)[0]
    return int(text) if text.isdigit() else None


def write_gpu_map(session: Session, alloc: CellAllocator, spec: ClusterSpec, now: dt.datetime) -> None:
    """Mirror ``alloc.gpu_map()`` into gpu_bindings (only rows that changed) and store the snapshot."""
    gpu_type = {n.name: n.gpu_type for n in spec.nodes}
    existing = {(r.node, r.gpu_index): r for r in session.scalars(select(GpuBinding))}
    seen: set[tuple[str, int]] = set()
    for node, gpus in alloc.gpu_map().items():
        for idx, use in gpus.items():
            key = (node, int(idx))
            seen.add(key)
            if use.foreign:
                kind = "foreign"
            elif use.job is not None:
                kind = "opportunistic" if use.opportunistic else "guaranteed"
            else:
                kind = "free"
            values = {
                "gpu_type": gpu_type.get(node),
                "vc_name": use.vc,
                "slurm_job_id": _job_id_of(use.job),
                "kind": kind,
                "bad": bool(use.bad),
            }
            row = existing.get(key)
            if row is None:
                session.add(GpuBinding(node=node, gpu_index=int(idx), updated_at=now, **values))
            elif any(getattr(row, k) != v for k, v in values.items()):
                for k, v in values.items():
                    setattr(row, k, v)
                row.updated_at = now
    for key, row in existing.items():
        if key not in seen:
            session.delete(row)
    snap = session.get(CellSnapshot, 1)
    data = alloc.snapshot()
    if snap is None:
        session.add(CellSnapshot(id=1, taken_at=now, data=data))
    else:
        snap.taken_at = now
        snap.data = data


#: the ledger's GPU count is a 32-bit column on PostgreSQL; a larger ask is refused by decide (hivebatch.bounds)
INT32_MAX = 2**31 - 1


def set_request(job: Job, req: JobRequest) -> None:
    """The request the ledger keeps for a hivebatch job: the fields it sets, its GPU count and type."""
    job.request = {k: v for k, v in asdict(req).items() if v is not None}
    job.gpus = min(req.gpus, INT32_MAX)
    job.gpu_type = req.gpu_type


def set_state(session: Session, key: str, value: Json, now: dt.datetime) -> None:
    row = session.get(ControllerState, key)
    text = json.dumps(value, sort_keys=True, default=str)
    if row is None:
        session.add(ControllerState(key=key, value=text, updated_at=now))
    elif row.value != text:
        row.value = text
        row.updated_at = now
