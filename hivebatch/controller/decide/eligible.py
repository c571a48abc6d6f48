"""Only jobs Slurm would start now are placed: a job waiting for its dependency, its begin time or its
owner's release holds no cells, and its owner reads why (verified on the lab: a held job's squeue record
keeps ``dependency`` as ``afterok:983(unfulfilled)`` and ``eligible_time`` at its ``--begin``)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping

from hivebatch.request import owner_holds, released_by_owner
from hivebatch.slurm.types import FINISHED_STATES, SlurmJob


def not_eligible(
    sj: SlurmJob, now: dt.datetime, first_start: bool = True, others: Mapping[int, SlurmJob] | None = None
) -> str | None:
    """Why Slurm would not start the job now, or None when it would. A requeued job's begin time is
    Slurm's short requeue delay, not the owner's wish: it may keep its cells (``first_start`` False).
    ``others``: the jobs squeue lists, to judge a dependency Slurm has not re-tested yet."""
    if owner_holds(sj):
        return f"held by its owner (--hold): scontrol release {sj.job_id} lets hivebatch place it"
    if "(unfulfilled)" in sj.dependency and not _met(sj.dependency, others or {}):
        return f"waits for its dependency {sj.dependency.replace('(unfulfilled)', '')}; it holds no GPUs meanwhile"
    if "(failed)" in sj.dependency:
        return f"its dependency {sj.dependency.replace('(failed)', '')} can never be met: cancel it (scancel {sj.job_id})"
    begin = sj.eligible_time
    if first_start and begin is not None and not released_by_owner(sj) and begin > _aware(now):
        return f"waits for its begin time {begin.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC; it holds no GPUs meanwhile"
    return None


# what each dependency type waits for, judged from the other job's squeue state
_MET: dict[str, Callable[[str], bool]] = {
    "after": lambda state: state != "PENDING",
    "afterany": lambda state: state in FINISHED_STATES,
    "afterok": lambda state: state == "COMPLETED",
    "afternotok": lambda state: state in FINISHED_STATES and state != "COMPLETED",
}


def _met(dependency: str, others: Mapping[int, SlurmJob]) -> bool:
    """Slurm re-tests a dependency in its scheduling passes, which may skip a held job (seen on the lab:
    ``afterok:N(unfulfilled)`` long after N completed). True when every condition is met by what squeue
    lists; a condition of another type, or on a job squeue no longer lists, is left to Slurm."""
    parts = [p for p in re.split(r"[,?]", dependency.replace("(unfulfilled)", "")) if p]
    for part in parts:
        kind, _, ids = part.partition(":")
        test = _MET.get(kind)
        for raw in ids.split(":"):
            other = others.get(int(raw.split("+")[0])) if raw.split("+")[0].isdigit() else None
            if test is None or other is None or not test(other.state):
                return False
    return bool(parts)


def _aware(t: dt.datetime) -> dt.datetime:
    # the controller's clock is naive UTC; Slurm's times are aware
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
