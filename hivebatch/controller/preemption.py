"""The one place a job's run is booked as cut short: by our own preemption, by Slurm's, by a requeue."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from hivebatch.controller.decide import symmetric_indices
from hivebatch.controller.decide.gres import untyped_count
from hivebatch.controller.record import Recorder, account_run, placement_text
from hivebatch.db.models import Job
from hivebatch.slurm.types import SlurmJob, shown_id


def preemptor(by: int | None, slurm: Mapping[int, SlurmJob] | None = None) -> str:
    """Who took a victim's GPUs, as its reason names it (None: its notice was written before it was kept):
    as squeue and hq show the job (an array's task as 1948_3) when ``slurm`` lists it."""
    if by is None:
        return "a higher-priority job"
    return f"job {shown_id(by, slurm)}"


def what_it_leaves(victim: Job, taker: Job | None) -> str:
    """What the preemptor takes from the victim: its GPUs, or, where their GPUs do not meet, the nodes
    the victim's ExclusiveUser partition keeps to its user (victims._kept_off_by)."""
    mine, theirs = victim.placement or {}, (taker.placement if taker is not None else None) or {}
    shared = sorted(set(mine) & set(theirs))
    if not theirs or any(set(mine[n]) & set(theirs[n]) for n in shared):
        return f"its GPUs {placement_text(mine)}"
    return f"{', '.join(shared)}, which its ExclusiveUser partition keeps to one user"


def resume_reason(job: Job, who: str) -> str:
    """What a requeued victim waits for: its GPU indices, which Slurm's typed gres keeps for it, or
    under an untyped gres its count of GPUs on a node."""
    per_node = untyped_count(job.gres)
    if per_node is not None:
        return f"preempted by {who}; it resumes when {per_node} GPU(s) per node are free for it"
    return f"preempted by {who}; it resumes on GPUs {symmetric_indices(job.placement or {}) or []} when free"


def book_preemption(
    session: Session,
    rec: Recorder,
    job: Job,
    end: dt.datetime | None,
    kind: str,
    message: str,
    data: dict[str, Any] | None = None,
) -> None:
    """Book the run that ended at ``end`` as lost GPU-hours (None: it never started), count the
    preemption, clear any intent and leave the job ``preempted`` — waiting to be placed again."""
    if end is not None:
        account_run(session, job, end, preempted=True)
    job.intent = None
    job.notice_until = None  # notice_by stays until it is placed again: its preemptor still claims its GPUs
    job.state = "preempted"
    job.preemptions = (job.preemptions or 0) + 1
    rec.event(session, job, kind, message, data)
