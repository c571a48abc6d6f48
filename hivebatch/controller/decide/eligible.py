"""Only jobs Slurm would start now are placed: a job waiting for its dependency, its begin time or its
owner's release holds no cells, and its owner reads why (verified on the lab: a held job's squeue record
keeps ``dependency`` as ``afterok:983(unfulfilled)`` and ``eligible_time`` at its ``--begin``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from hivebatch.controller.decide.dependency import Listing, judge, shown
from hivebatch.controller.decide.times import aware
from hivebatch.request import owner_holds, released_by_owner
from hivebatch.slurm.types import SlurmJob


def not_eligible(
    sj: SlurmJob,
    now: dt.datetime,
    first_start: bool = True,
    others: Mapping[int, SlurmJob] | Listing | None = None,
) -> str | None:
    """Why Slurm would not start the job now, or None when it would. A requeued job's begin time is
    Slurm's short requeue delay, not the owner's wish: it may keep its cells (``first_start`` False).
    ``others``: the jobs squeue lists, to judge a dependency Slurm has not re-tested yet."""
    if owner_holds(sj):
        return f"held by its owner: scontrol release {sj.job_id} lets hivebatch place it"
    verdict = judge(sj, others or {}, now)
    if verdict == "never":
        return f"its dependency {shown(sj.dependency)} can never be met: cancel it (scancel {sj.job_id})"
    if verdict == "wait":
        return f"waits for its dependency {shown(sj.dependency)}; it holds no GPUs meanwhile"
    begin = sj.eligible_time
    if first_start and begin is not None and not released_by_owner(sj) and begin > aware(now):
        return f"waits for its begin time {begin.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC; it holds no GPUs meanwhile"
    return None
