"""A start time an owner sets on a job waiting for GPUs, kept in the ledger through their hold and release.

Plain Slurm keeps a pending job's begin time through its owner's ``scontrol hold`` and release, and takes
a start time set while the job is held (tests/fixtures/slurm/owner_start_time.txt). Through hivebatch the
plugin's marks stand in Slurm's begin time while the job is held or just released, so the controller keeps
the owner's time (``jobs.owner_begin``) and gives it back when it takes the job back. It learns the time
from Slurm's begin time each cycle, and from the plugin's note of every such update: a time set over a
mark never reaches Slurm, and one set and released within a cycle would be gone before the next.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy.orm import Session

from hivebatch.controller.decide.times import aware
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import to_utc
from hivebatch.controller.record import Recorder
from hivebatch.controller.refusals import Note, StartTime, job_of
from hivebatch.db.models import Job
from hivebatch.request import begin_kept
from hivebatch.slurm.types import SlurmJob

KIND = "start_time"


def never_started(job: Job) -> bool:
    """Only such a job's begin time is its owner's: a requeued one's is Slurm's requeue delay."""
    return job.state == "queued" and job.start_time is None and not job.placement


def keep(session: Session, rec: Recorder, job: Job, sj: SlurmJob, begin: dt.datetime | None) -> None:
    """The owner set the job's start time to ``begin`` (a past one, or None, is "now"): kept, with an
    event, unless it is the one kept already."""
    now = aware(rec.now)
    seen = _still_ahead(begin, now)
    if seen == _still_ahead(begin_kept(sj, job.owner_begin), now):
        return
    job.owner_begin = to_utc(seen or now)
    when = f"{seen.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC" if seen else "now"
    rec.event(session, job, KIND, f"its owner set its start time to {when}", {"begin": when})


def _still_ahead(t: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    return t if t is not None and aware(t) > now else None


def apply_all(session: Session, rec: Recorder, notes: Sequence[Note], ledger: Ledger) -> None:
    for note in notes:
        if not isinstance(note, StartTime):
            continue
        job = job_of(note, ledger.jobs)
        sj = ledger.slurm.get(note.slurm_job_id)
        if job is not None and sj is not None and not job.foreign and never_started(job):
            keep(session, rec, job, sj, note.begin.replace(tzinfo=dt.UTC))


__all__ = ["KIND", "apply_all", "keep", "never_started"]
