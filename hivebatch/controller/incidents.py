"""A job Slurm keeps starting elsewhere than granted is not placed again at once, every cycle.

The first incident is requeued and placed again at once (``reconcile.machine.granted_kept``): Slurm
had a choice and took another GPU, in a race with a job ending (docs/controller.md). A second one
whose GPUs are not even the grant's count on the grant's nodes is no race: Slurm's record of the job
makes it so, and placing it again each cycle would start and requeue it for ever, running its script
each time (seen on the lab: a job whose CPUsPerTask was updated while it waited was started with GPUs
on one node of its two, requeued and placed again every 12 s). Races on other indices of the same
count repeat too under load (a lab replay had a job meet two), so they are given more tries. Such a
job waits ``RETRY_AFTER_S`` from its last placement, with a reason that says so, and is then placed
again.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.db.models import Event, Job

KIND = "placement_incident"
REPEATED = "Slurm keeps starting it elsewhere than granted"
RETRY_AFTER_S = 1800.0
# incidents further apart than this are counted apart: a job that ran as granted for a day is not repeating
WINDOW_S = 86400.0
# incidents in the window after which a job waits: GPUs elsewhere than the grant's count on its nodes,
# and other indices of the same count
SHAPE_TRIES = 2
INDEX_TRIES = 4


def repeating(times: int, granted: dict[str, list[int]], actual: dict[str, list[int]]) -> bool:
    """Is the ``times``-th incident in the window one to wait after, Slurm having run the job on ``actual``?"""
    same_shape = set(actual) == set(granted) and all(len(actual[n]) == len(granted[n]) for n in granted)
    return times >= (INDEX_TRIES if same_shape else SHAPE_TRIES)


def earlier_requeues(session: Session, job: Job, now: dt.datetime) -> int:
    """The job's incidents in the last WINDOW_S that requeued it (a requeue that failed did not)."""
    since = now - dt.timedelta(seconds=WINDOW_S)
    rows = session.scalars(
        select(Event.data).where(Event.job_id == job.id, Event.kind == KIND, Event.time >= since)
    )
    return sum(1 for data in rows if isinstance(data, dict) and data.get("requeued"))


def retry_at(job: Job) -> dt.datetime | None:
    """When a job waiting out a repeated incident is placed again."""
    return job.placed_at + dt.timedelta(seconds=RETRY_AFTER_S) if job.placed_at is not None else None


def repeated_reason(times: int, where: str, job: Job) -> str:
    retry = retry_at(job)
    when = f"after {retry:%H:%M} UTC" if retry is not None else "later"
    return (
        f"{REPEATED} ({times} times; {where}): hivebatch places it again {when}; "
        "if it keeps happening, cancel it and submit it again, or tell your admin"
    )


def waiting_out(job: Job, now: dt.datetime) -> str | None:
    """The job's reason while it waits RETRY_AFTER_S after a repeated incident."""
    reason = job.reason or ""
    retry = retry_at(job)
    return reason if reason.startswith(REPEATED) and retry is not None and now < retry else None
