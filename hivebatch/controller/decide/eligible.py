"""Only jobs Slurm would start now are placed: a job waiting for its dependency, its begin time or its
owner's release holds no cells, and its owner reads why (verified on the lab: a held job's squeue record
keeps ``dependency`` as ``afterok:983(unfulfilled)`` and ``eligible_time`` at its ``--begin``, which the
request keeps too: a release replaces it while the job waits). A job whose
``--deadline`` can no longer be met is Slurm's to end, as it ends one it schedules itself."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from hivebatch.controller.decide.dependency import Listing, judge, shown
from hivebatch.controller.decide.times import aware
from hivebatch.request import admin_holds, begin_asked, owner_holds
from hivebatch.slurm.types import PartitionAccess, SlurmJob
from hivebatch.submit.timefmt import format_duration

OWNER_HELD = "held by its owner"


def not_eligible(
    sj: SlurmJob,
    now: dt.datetime,
    first_start: bool = True,
    others: Mapping[int, SlurmJob] | Listing | None = None,
    owner_begin: dt.datetime | None = None,
) -> str | None:
    """Why Slurm would not start the job now, or None when it would. A requeued job's begin time is
    Slurm's short requeue delay, not the owner's wish: it may keep its cells (``first_start`` False).
    ``others``: the jobs squeue lists, to judge a dependency Slurm has not re-tested yet.
    ``owner_begin``: the start time its owner last set while it waited (the ledger's), which a release
    hides behind the plugin's mark until the controller gives it back."""
    if owner_holds(sj):
        return f"{OWNER_HELD}: scontrol release {sj.display_id} lets hivebatch place it"
    if admin_holds(sj):
        return f"held by an admin: it waits until an admin releases it (scontrol release {sj.display_id})"
    verdict = judge(sj, others or {}, now)
    if verdict == "never":
        return f"its dependency {shown(sj.dependency)} can never be met: cancel it (scancel {sj.display_id})"
    if verdict == "wait":
        return f"waits for its dependency {shown(sj.dependency)}; it holds no GPUs meanwhile"
    begin = begin_asked(sj, owner_begin)
    if first_start and begin is not None and begin > aware(now):
        return f"waits for its begin time {begin.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC; it holds no GPUs meanwhile"
    return None


def killed_for_dependency(
    sj: SlurmJob, now: dt.datetime, others: Mapping[int, SlurmJob] | Listing
) -> str | None:
    """Why Slurm cancels the job, once released, or None: it asked ``--kill-on-invalid-dep=yes``, or
    asked neither way on a cluster whose DependencyParameters kill such jobs, and its dependency can
    never be met. slurmctld tests a held job's dependency only once a minute, a released one at its
    next pass, and before its begin time, so the plugin's parking of an unpinned job does not keep it
    (tests/fixtures/slurm/kill_invalid_dep.txt, kill_invalid_depend_site.txt). A job its owner or an
    admin holds keeps its hold until Slurm's own re-test, as on plain Slurm."""
    if not sj.cancelled_on_invalid_dep or owner_holds(sj) or admin_holds(sj):
        return None
    if judge(sj, others, now) != "never":
        return None
    asked = (
        "as it asked with --kill-on-invalid-dep=yes"
        if sj.kill_invalid_dep
        else "as the cluster's DependencyParameters=kill_invalid_depend says"
    )
    return f"its dependency {shown(sj.dependency)} can never be met: Slurm cancels it, {asked}"


# slurmctld judges a deadline by its own clock: a job released a moment too early would pass its
# check and start without the GPUs the plugin keeps off it
DEADLINE_MARGIN = dt.timedelta(seconds=2)


def past_deadline(sj: SlurmJob, now: dt.datetime) -> str | None:
    """Why the job can no longer finish by its ``--deadline``, or None. Slurm's own test (``deadline_ok``
    in slurmctld's scheduler): the deadline is before now plus the job's ``--time-min``, or its time
    limit when it gave none, and a job without a limit is never late. Slurm makes that test only on
    jobs it would schedule, so a job held for hivebatch is never ended by it (recorded:
    tests/fixtures/slurm/deadline_held.txt): the controller releases it to be ended."""
    run_s = sj.time_min_s or sj.time_limit_s
    if sj.deadline is None or not run_s:
        return None
    if aware(now) + dt.timedelta(seconds=run_s) <= sj.deadline + DEADLINE_MARGIN:
        return None
    which = "--time-min" if sj.time_min_s else "time limit"
    return (
        f"its deadline {sj.deadline.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC can no longer be met "
        f"(its {which} of {run_s // 60} min would end after it): Slurm ends it as DEADLINE"
    )


def partition_stopped(sj: SlurmJob, stopped: Mapping[str, str]) -> str | None:
    """Why Slurm starts the job nowhere now: every partition it asked for is DOWN or INACTIVE
    (``stopped``: partition -> state), as an admin sets one for maintenance; None otherwise."""
    asked = sj.partitions
    if not asked or not all(p in stopped for p in asked):
        return None
    which = ", ".join(f"{p} is {stopped[p]}" for p in asked)
    return (
        f"its partition {which}: Slurm starts no job there until an admin sets it UP again; "
        "it holds no GPUs meanwhile"
    )


def over_partition_time(sj: SlurmJob, max_time: Mapping[str, int]) -> str | None:
    """Why Slurm never starts the job: its time limit is longer than the MaxTime of every partition it
    asked for (``max_time``: partition -> seconds; a site without EnforcePartLimits accepts such a job
    and leaves it pending, PartitionTimeLimit); None otherwise. Its owner may lower the limit."""
    asked = sj.partitions
    if not asked or not all(p in max_time for p in asked):
        return None
    longest = max(max_time[p] for p in asked)
    if sj.time_limit_s is not None and sj.time_limit_s <= longest:
        return None
    limit = format_duration(sj.time_limit_s)
    where = ", ".join(f"{p}'s MaxTime is {format_duration(max_time[p])}" for p in asked)
    return (
        f"its time limit ({limit}) is longer than Slurm allows: partition {where}; lower it "
        f"(scontrol update job {sj.display_id} TimeLimit={format_duration(longest)}) or cancel it"
    )


def kept_out_of_partitions(sj: SlurmJob, access: Mapping[str, PartitionAccess]) -> str | None:
    """Why Slurm never starts the job: every partition it asked for keeps out its account or QOS
    (``access``: partition -> who may run there; Slurm accepts such a job and leaves it pending,
    tests/fixtures/slurm/partition_access.txt); None otherwise. Its owner may move it."""
    asked = sj.partitions
    whys = [
        (p, why) for p in asked if (why := access.get(p, PartitionAccess()).keeps_out(sj.account, sj.qos))
    ]
    if not asked or len(whys) < len(asked):
        return None
    which = "; ".join(f"partition {p} {why}" for p, why in whys)
    return (
        f"Slurm never starts it where it asked: {which}; move it (scontrol update job {sj.display_id} "
        "Partition=...) or cancel it"
    )
