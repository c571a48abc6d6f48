"""Each user's recent GPU-hours from the jobs ledger, decaying, for fairshare inside a VC.

The ledger books a job's GPU-hours when a run ends (record.account_run) and keeps only totals per
job, so a finished job's hours are taken as spread evenly from its first start to its end; the run
still going is counted from its segment start to now with the GPUs it holds. No new table: the
figures are recomputed every cycle, and only jobs that ended within ``HORIZON_HALF_LIVES`` half-lives
are read (older usage counts less than 1/1000).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from hivebatch.controller.decide.times import epoch
from hivebatch.db.models import Job
from hivebatch.fairshare import Run, usage_by_user

HORIZON_HALF_LIVES = 10


def _runs(
    user: str,
    booked_h: float,
    start: dt.datetime | None,
    end: dt.datetime | None,
    segment: tuple[dt.datetime, int] | None,
    now: float,
) -> Iterator[Run]:
    """The booked hours as one even run over [start, end], and the unbooked current run."""
    seg_start = epoch(segment[0]) if segment is not None else None
    if booked_h > 0:
        t1 = epoch(end) if end is not None else (seg_start if seg_start is not None else now)
        t0 = epoch(start) if start is not None else t1
        span = max(t1 - t0, 1.0)  # a run too short to spread counts at its end
        yield Run(user, booked_h * 3600.0 / span, t1 - span, t1)
    if segment is not None and seg_start is not None and segment[1] > 0:
        yield Run(user, float(segment[1]), seg_start, now)


def _gpus(placement: Any) -> int:
    if not isinstance(placement, dict):
        return 0
    return sum(len(v) for v in placement.values() if isinstance(v, list))


def recent_usage(session: Session, now: dt.datetime, half_life_s: float) -> dict[str, float]:
    """User -> decayed GPU-hours of hsub jobs (guaranteed and opportunistic) as of ``now``."""
    since = now - dt.timedelta(seconds=HORIZON_HALF_LIVES * half_life_s)
    rows = session.execute(
        select(
            Job.user,
            Job.gpu_hours_guaranteed,
            Job.gpu_hours_opportunistic,
            Job.start_time,
            Job.end_time,
            Job.segment_start,
            Job.placement,
            Job.state,
        ).where(
            Job.user.is_not(None),
            Job.foreign.is_(False),
            Job.start_time.is_not(None),
            or_(Job.end_time.is_(None), Job.end_time >= since),
        )
    )
    t = epoch(now)
    runs: list[Run] = []
    for user, g_h, o_h, start, end, seg, placement, state in rows:
        segment = (seg, _gpus(placement)) if seg is not None and state == "running" else None
        runs.extend(_runs(str(user), (g_h or 0.0) + (o_h or 0.0), start, end, segment, t))
    return usage_by_user(runs, t, half_life_s)
