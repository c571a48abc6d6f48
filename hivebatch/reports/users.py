"""Per-user report: GPU-hours, waits and QoS outcomes per user (sreport's AccountUtilizationByUser
in GPU-hours), plus flags for habits that waste reserved GPUs.

Waste flags (each with the advice that fixes it):
- *time limits far too long*: at least ``MIN_JOBS_FOR_LIMIT_FLAG`` finished jobs with a time limit,
  and the median job ran less than ``SHORT_RUN_RATIO`` of its limit. Over-long limits make the
  predicted start of everybody behind them pessimistic and keep backfill from using the gap.
- *often preempted*: ``MANY_PREEMPTIONS`` or more preemptions in the window; the GPU-hours of the
  runs that were cut short are lost unless the job checkpoints.
- *multi-node jobs that fit one node*: jobs whose user asked for more than one node (-N) while their
  GPU count fits on one node of their GPU type; they pay cross-node communication for nothing and
  fragment the cluster. A multi-node shape hivebatch's placement model chose is not the user's doing
  and is not flagged.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime

from hivebatch.reports.rows import GUARANTEED_CLASSES, JobRow, RunSegment
from hivebatch.reports.usage import (
    ClassRate,
    add_segments,
    clipped_hours,
    in_window,
    mean,
    qos_outcome,
    queue_delay_s,
    run_seconds,
)

SHORT_RUN_RATIO = 0.25
MIN_JOBS_FOR_LIMIT_FLAG = 2
MANY_PREEMPTIONS = 3


@dataclass
class UserReport:
    user: str
    vcs: list[str]
    jobs_run: int = 0
    jobs_pending: int = 0
    gpu_hours_guaranteed: float = 0.0
    gpu_hours_opportunistic: float = 0.0
    mean_queue_s: float | None = None
    qos: ClassRate = field(default_factory=ClassRate)
    missed_ect: int = 0
    preemptions: int = 0
    preempted_gpu_hours: float = 0.0
    median_limit_use: float | None = None  # median run time / time limit of finished jobs
    multinode_fit_one: int = 0
    flags: list[str] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_hours_guaranteed + self.gpu_hours_opportunistic


def users_report(
    jobs: list[JobRow],
    segments: list[RunSegment],
    since: datetime,
    until: datetime,
    gpus_per_node: dict[str, int],
    only_vc: str | None = None,
) -> list[UserReport]:
    """Users sorted by GPU-hours used, largest first. ``gpus_per_node`` maps GPU type → GPUs per node."""
    if only_vc is not None:
        jobs = [j for j in jobs if j.vc == only_vc]
        segments = [s for s in segments if s.vc == only_vc]
    jobs = [j for j in jobs if in_window(j, since, until)]
    largest_node = max(gpus_per_node.values(), default=0)
    users: dict[str, UserReport] = {}
    delays: dict[str, list[float]] = {}
    limit_use: dict[str, list[float]] = {}

    def get(user: str) -> UserReport:
        if user not in users:
            users[user] = UserReport(user=user, vcs=[])
            delays[user] = []
            limit_use[user] = []
        return users[user]

    segs_by_job = add_segments(segments, since, until, lambda seg: get(seg.user))

    for job in jobs:
        rep = get(job.user)
        if job.vc not in rep.vcs:
            rep.vcs.append(job.vc)
        if any(clipped_hours(s, since, until) > 0 for s in segs_by_job.get(job.job_id, [])):
            rep.jobs_run += 1
        if job.pending:
            rep.jobs_pending += 1
        delay = queue_delay_s(job)
        if delay is not None and job.start_time is not None and since <= job.start_time < until:
            delays[job.user].append(delay)
        outcome = qos_outcome(job, since, until)
        if outcome is not None:
            rep.qos.total += 1
            rep.qos.met += int(outcome)
            rep.missed_ect += int(not outcome)
        if (
            job.finished
            and job.time_limit_s
            and job.end_time is not None
            and since < job.end_time <= until
            and job.job_id in segs_by_job
        ):
            limit_use[job.user].append(
                run_seconds(job.job_id, segs_by_job[job.job_id], until) / job.time_limit_s
            )
        per_node = gpus_per_node.get(job.gpu_type or "", largest_node)
        asked = job.requested_nodes or 0
        if job.start_time is not None and asked > 1 and _nodes_used(job) > 1 and 0 < job.gpus <= per_node:
            rep.multinode_fit_one += 1

    for user, rep in users.items():
        rep.vcs.sort()
        rep.mean_queue_s = mean(delays[user])
        if limit_use[user]:
            rep.median_limit_use = statistics.median(limit_use[user])
        rep.flags = _flags(rep, len(limit_use[user]))
    return sorted(users.values(), key=lambda r: (-r.gpu_hours, r.user))


def _nodes_used(job: JobRow) -> int:
    return len(job.placement) if job.placement else job.nodes


def _flags(rep: UserReport, limit_jobs: int) -> list[str]:
    flags: list[str] = []
    if (
        rep.median_limit_use is not None
        and limit_jobs >= MIN_JOBS_FOR_LIMIT_FLAG
        and rep.median_limit_use < SHORT_RUN_RATIO
    ):
        flags.append(
            f"time limits too long: median job ran {100 * rep.median_limit_use:.0f}% of its limit "
            f"over {limit_jobs} jobs (set -t closer to the real run time)"
        )
    if rep.preemptions >= MANY_PREEMPTIONS:
        flags.append(
            f"preempted {rep.preemptions}×, {rep.preempted_gpu_hours:.1f} GPU-h lost "
            "(checkpoint, or submit as a guaranteed class)"
        )
    if rep.multinode_fit_one:
        flags.append(
            f"{rep.multinode_fit_one} multi-node job{'s' if rep.multinode_fit_one > 1 else ''} "
            "would fit on one node (use -N 1)"
        )
    return flags


__all__ = ["GUARANTEED_CLASSES", "UserReport", "users_report"]
