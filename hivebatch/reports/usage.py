"""The quota report: per VC, who used how much of what they reserve, how long they waited, and
whether the QoS deadlines held; plus cluster totals.

Window: every figure covers ``since``..``until``. GPU-hours are clipped to the window; queuing
delays are those of jobs that *started* in it (``since <= start < until``); the QoS rate counts jobs
that *finished* in it (``since < end <= until``: a job ending at the instant a report is cut belongs to
that report), plus unfinished jobs whose deadline (ECT) already passed (they can no longer meet it).
Cancelled jobs count in no rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from hivebatch.reports.private import PrivateJob, private_queue_delays
from hivebatch.reports.rows import (
    CANCELLED_STATES,
    GUARANTEED_CLASSES,
    JobRow,
    RunSegment,
    VCInfo,
    VCNow,
    cells_text,
)

# Verdict thresholds: what makes a VC look idle or starved on the Monday report.
IDLE_SHARE = 0.25
BUSY_SHARE = 0.80
STARVED_WAIT_S = 3600.0
STARVED_EXCESS_S = 1800.0


@dataclass
class ClassRate:
    met: int = 0
    total: int = 0

    @property
    def rate(self) -> float | None:
        return self.met / self.total if self.total else None

    def text(self) -> str:
        if not self.total:
            return "-"
        return f"{100 * self.met / self.total:.0f}% ({self.met}/{self.total})"


@dataclass
class VCReport:
    name: str
    cells: dict[str, int]
    gpus_reserved: int
    gpu_hours_guaranteed: float = 0.0
    gpu_hours_opportunistic: float = 0.0
    reservation_share: float | None = None  # guaranteed GPU-hours / (reserved GPUs × window hours)
    jobs_run: int = 0
    jobs_pending: int = 0
    guaranteed_pending: int = 0  # pending jobs of guaranteed classes: what starvation is about
    oldest_pending_s: float | None = None  # longest wait of a pending guaranteed job
    mean_queue_s: float | None = None
    p95_queue_s: float | None = None
    qos: dict[str, ClassRate] = field(default_factory=dict)
    missed_ect: int = 0
    private_queue_s: float | None = None
    excess_queue_s: float | None = None
    preempted_gpu_hours: float = 0.0
    preemptions: int = 0
    verdict: str = "ok"
    verdict_detail: str = ""
    now: VCNow | None = None  # at the controller's last cycle

    @property
    def now_text(self) -> str:
        """GPUs in use / healthy capacity now, e.g. ``8/8 of 16``."""
        if self.now is None:
            return "-"
        text = f"{self.now.gpus_used}/{self.now.capacity}"
        return text + (f" of {self.now.gpus_total}" if self.now.capacity < self.now.gpus_total else "")

    @property
    def cells_text(self) -> str:
        return cells_text(self.cells)

    @property
    def qos_overall(self) -> ClassRate:
        return _sum_rates(self.qos.values())


@dataclass
class ClusterTotals:
    gpus: int
    window_hours: float
    gpu_hours_capacity: float
    gpu_hours_guaranteed: float
    gpu_hours_opportunistic: float
    utilization: float | None
    jobs_run: int
    jobs_pending: int
    qos: dict[str, ClassRate]
    missed_ect: int
    preempted_gpu_hours: float
    preemptions: int
    gpus_lent_now: float  # GPUs running opportunistic work right now (a slice counts its share)
    # opportunistic GPU slices on the idle part of GPUs guaranteed work held at the same time: capacity
    # co-location added on top of what the guarantees delivered
    gpu_hours_colocated: float = 0.0

    @property
    def qos_overall(self) -> ClassRate:
        return _sum_rates(self.qos.values())


@dataclass
class QuotaReport:
    since: datetime
    until: datetime
    vcs: list[VCReport]
    totals: ClusterTotals
    missed_jobs: list[JobRow] = field(default_factory=list)
    waiting_jobs: list[JobRow] = field(
        default_factory=list
    )  # pending at the window's end, longest wait first


def _sum_rates(rates: Iterable[ClassRate]) -> ClassRate:
    out = ClassRate()
    for r in rates:
        out.met += r.met
        out.total += r.total
    return out


def clipped_hours(seg: RunSegment, since: datetime, until: datetime) -> float:
    """Hours of ``seg`` inside the window (a running segment runs until ``until``)."""
    start = max(seg.start, since)
    end = min(seg.end or until, until)
    return max(0.0, (end - start).total_seconds()) / 3600.0


def p95(values: list[float]) -> float | None:
    """Nearest-rank 95th percentile: the smallest value with at least 95% of values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def in_window(job: JobRow, since: datetime, until: datetime) -> bool:
    """The job existed during the window: submitted before its end, not finished before its start."""
    return job.submit_time < until and (job.end_time is None or job.end_time >= since)


#: A class whose ECT is the submission itself (urgent with the paper's c = 0) can never finish by it;
#: such a job counts as served when it started within two controller cycles of its submission.
ASAP_GRACE = timedelta(seconds=120)


def qos_outcome(job: JobRow, since: datetime, until: datetime) -> bool | None:
    """True = met its ECT, False = missed it, None = does not count (yet) in this window."""
    if job.qos not in GUARANTEED_CLASSES or job.ect is None or job.state in CANCELLED_STATES:
        return None
    if job.ect <= job.submit_time:
        deadline = job.submit_time + ASAP_GRACE
        if job.start_time is not None:
            return job.start_time <= deadline if since < job.start_time <= until else None
        return False if since <= deadline < until else None
    if job.finished and job.end_time is not None:
        if not since < job.end_time <= until:
            return None
        return job.end_time <= job.ect
    # Still queued or running: it counts once its deadline has passed, as a miss.
    if job.ect < until and job.ect >= since:
        return False
    return None


def queue_delay_s(job: JobRow) -> float | None:
    if job.start_time is None:
        return None
    return max(0.0, (job.start_time - job.submit_time).total_seconds())


def run_seconds(job_id: str, segments: list[RunSegment], until: datetime) -> float:
    return sum(((s.end or until) - s.start).total_seconds() for s in segments if s.job_id == job_id)


def _verdict(vc: VCReport) -> tuple[str, str]:
    """starved: its guaranteed jobs wait although its reservation is not full (or much longer than a
    private cluster of its cells would make them); full: it uses most of what it reserves (a backlog
    there asks for more cells, not for a fix); idle: it leaves most of its reservation unused."""
    share = vc.reservation_share
    waiting = ""
    if vc.guaranteed_pending:
        waiting = f"{vc.guaranteed_pending} pending"
        if vc.oldest_pending_s is not None:
            waiting += f", oldest waits {vc.oldest_pending_s / 3600:.1f}h"
    long_wait = vc.guaranteed_pending and (vc.oldest_pending_s or 0) >= STARVED_WAIT_S
    excess = (vc.excess_queue_s or 0) >= STARVED_EXCESS_S
    if (long_wait and (share is None or share < BUSY_SHARE)) or excess:
        parts = [waiting] if waiting else []
        if share is not None:
            parts.append(f"{100 * share:.0f}% of its reservation used")
        if excess and vc.excess_queue_s is not None:
            parts.append(f"waits +{vc.excess_queue_s / 3600:.1f}h longer than on its own cells")
        return "starved", ", ".join(parts)
    if share is not None and share >= BUSY_SHARE:
        return "full", f"{100 * share:.0f}% of its reservation used" + (f", {waiting}" if waiting else "")
    if share is not None and share < IDLE_SHARE and not vc.guaranteed_pending:
        return "idle", f"{100 * share:.0f}% of its reservation used"
    return "ok", ""


def _vc_report(name: str, cells: Mapping[str, int] | None = None, gpus: int = 0) -> VCReport:
    """An empty report for one VC; a VC gone from the config has no cells and no reservation."""
    return VCReport(
        name=name,
        cells=dict(cells or {}),
        gpus_reserved=gpus,
        qos={c: ClassRate() for c in GUARANTEED_CLASSES},
    )


class GpuHourTotals(Protocol):
    """The run-segment totals a report keeps (a VC's or a user's)."""

    gpu_hours_guaranteed: float
    gpu_hours_opportunistic: float
    preempted_gpu_hours: float
    preemptions: int


def add_segments(
    segments: list[RunSegment],
    since: datetime,
    until: datetime,
    report_for: Callable[[RunSegment], GpuHourTotals],
) -> dict[str, list[RunSegment]]:
    """Add each run segment's GPU-hours and preemptions to its report; return the segments by job."""
    segs_by_job: dict[str, list[RunSegment]] = {}
    for seg in segments:
        segs_by_job.setdefault(seg.job_id, []).append(seg)
        rep = report_for(seg)
        gpu_h = seg.gpus * clipped_hours(seg, since, until)
        if seg.opportunistic:
            rep.gpu_hours_opportunistic += gpu_h
        else:
            rep.gpu_hours_guaranteed += gpu_h
        if seg.preempted and seg.end is not None and since < seg.end <= until:
            rep.preempted_gpu_hours += gpu_h
            rep.preemptions += 1
    return segs_by_job


def _add_segments(
    reports: dict[str, VCReport], segments: list[RunSegment], since: datetime, until: datetime
) -> dict[str, list[RunSegment]]:
    """Add each run segment's GPU-hours and preemptions to its VC; return the segments by job."""

    def report_for(seg: RunSegment) -> VCReport:
        rep = reports.get(seg.vc)
        if rep is None:
            rep = reports[seg.vc] = _vc_report(seg.vc)
        return rep

    return add_segments(segments, since, until, report_for)


@dataclass
class _JobTally:
    """What the per-job pass collects besides the VC counters: missed jobs, queue delays, starts."""

    missed: list[JobRow]
    delays: dict[str, list[float]]
    started_guaranteed: dict[str, list[JobRow]]


def _add_jobs(
    reports: dict[str, VCReport],
    jobs: list[JobRow],
    segs_by_job: Mapping[str, list[RunSegment]],
    since: datetime,
    until: datetime,
) -> _JobTally:
    """Count each job in the window into its VC: runs, pending, queue delays and QoS outcomes."""
    tally = _JobTally([], {name: [] for name in reports}, {name: [] for name in reports})
    for job in jobs:
        rep = reports[job.vc]
        ran = any(clipped_hours(s, since, until) > 0 for s in segs_by_job.get(job.job_id, []))
        if ran:
            rep.jobs_run += 1
        if job.pending:
            rep.jobs_pending += 1
            if not job.opportunistic:
                rep.guaranteed_pending += 1
                waited = (until - job.submit_time).total_seconds()
                rep.oldest_pending_s = max(rep.oldest_pending_s or 0.0, waited)
        delay = queue_delay_s(job)
        if delay is not None and job.start_time is not None and since <= job.start_time < until:
            tally.delays[job.vc].append(delay)
            if not job.opportunistic:
                tally.started_guaranteed[job.vc].append(job)
        outcome = qos_outcome(job, since, until)
        if outcome is not None:
            rate = rep.qos.setdefault(job.qos, ClassRate())
            rate.total += 1
            if outcome:
                rate.met += 1
            else:
                rep.missed_ect += 1
                tally.missed.append(job)
    return tally


def _ordered(reports: Mapping[str, VCReport], vcs: list[VCInfo], only_vc: str | None) -> list[VCReport]:
    """The config's VCs in config order, then VCs gone from the config by name; or just ``only_vc``."""
    ordered = [reports[v.name] for v in vcs] + sorted(
        (r for n, r in reports.items() if n not in {v.name for v in vcs}), key=lambda r: r.name
    )
    if only_vc is not None:
        ordered = [r for r in ordered if r.name == only_vc]
    return ordered


def quota_report(
    jobs: list[JobRow],
    segments: list[RunSegment],
    vcs: list[VCInfo],
    since: datetime,
    until: datetime,
    total_gpus: int | None = None,
    only_vc: str | None = None,
    now: Mapping[str, VCNow] | None = None,
) -> QuotaReport:
    """Compute the quota report over the window ``since``..``until`` (aware datetimes).

    ``now`` (optional) is each VC's state at the controller's last cycle: GPUs in use and healthy capacity.
    """
    window_h = max(0.0, (until - since).total_seconds()) / 3600.0
    jobs = [j for j in jobs if in_window(j, since, until)]
    reports = {v.name: _vc_report(v.name, v.cells, v.gpus) for v in vcs}
    for job in jobs:
        if job.vc not in reports:  # a VC no longer in the config still had usage: keep it visible
            reports[job.vc] = _vc_report(job.vc)
    segs_by_job = _add_segments(reports, segments, since, until)
    tally = _add_jobs(reports, jobs, segs_by_job, since, until)
    for name, rep in reports.items():
        if rep.gpus_reserved and window_h > 0:
            rep.reservation_share = rep.gpu_hours_guaranteed / (rep.gpus_reserved * window_h)
        rep.mean_queue_s = mean(tally.delays[name])
        rep.p95_queue_s = p95(tally.delays[name])
        _private_estimate(rep, tally.started_guaranteed[name], segs_by_job, until)
        rep.now = (now or {}).get(name)
        rep.verdict, rep.verdict_detail = _verdict(rep)

    ordered = _ordered(reports, vcs, only_vc)
    gpus = total_gpus if total_gpus is not None else sum(v.gpus for v in vcs)
    if only_vc is not None:
        # One VC's totals are measured against its own reservation, not the whole cluster.
        gpus = sum(r.gpus_reserved for r in ordered)
    totals = _totals(ordered, gpus, window_h, segments, until)
    names = {r.name for r in ordered}
    totals.gpu_hours_colocated = colocated_gpu_hours(
        [j for j in jobs if j.vc in names], segments, since, until
    )
    missed = tally.missed
    if only_vc is not None:
        missed = [j for j in missed if j.vc == only_vc]
    missed.sort(key=lambda j: (j.ect or j.submit_time, j.job_id))
    waiting = sorted(
        (j for j in jobs if j.pending and (only_vc is None or j.vc == only_vc)),
        key=lambda j: (j.opportunistic, j.submit_time, j.job_id),
    )
    return QuotaReport(
        since=since, until=until, vcs=ordered, totals=totals, missed_jobs=missed, waiting_jobs=waiting
    )


def colocated_gpu_hours(
    jobs: list[JobRow], segments: list[RunSegment], since: datetime, until: datetime
) -> float:
    """GPU-hours opportunistic slices ran on a GPU that guaranteed work held at the same time (their
    share of the GPU × the overlap), inside the window. A job's GPUs are its last placement."""
    rows = {j.job_id: j for j in jobs}
    held: dict[tuple[str, int], list[tuple[datetime, datetime]]] = {}
    guests: list[tuple[RunSegment, tuple[str, int]]] = []
    for seg in segments:
        row = rows.get(seg.job_id)
        if row is None or not row.placement:
            continue
        start, end = max(seg.start, since), min(seg.end or until, until)
        if end <= start:
            continue
        gpus = [(n, i) for n, idx in row.placement.items() for i in idx]
        if not seg.opportunistic:
            for key in gpus:
                held.setdefault(key, []).append((start, end))
        elif row.gpu_share < 1.0 and len(gpus) == 1:
            guests.append((seg, gpus[0]))
    total = 0.0
    for seg, key in guests:
        start, end = max(seg.start, since), min(seg.end or until, until)
        covered = _union_overlap(held.get(key, []), start, end)
        total += seg.gpus * covered / 3600.0
    return total


def _union_overlap(spans: list[tuple[datetime, datetime]], start: datetime, end: datetime) -> float:
    """Seconds of [start, end) covered by the union of ``spans``."""
    covered, cursor = 0.0, start
    for lo, hi in sorted(spans):
        lo, hi = max(lo, cursor), min(hi, end)
        if hi > lo:
            covered += (hi - lo).total_seconds()
            cursor = hi
    return covered


def _private_estimate(
    rep: VCReport, started: list[JobRow], segs_by_job: dict[str, list[RunSegment]], until: datetime
) -> None:
    if not started or not rep.gpus_reserved:
        return
    pjobs = [
        PrivateJob(
            j.job_id, j.submit_time, j.gpus, run_seconds(j.job_id, segs_by_job.get(j.job_id, []), until)
        )
        for j in started
    ]
    private = private_queue_delays(pjobs, rep.gpus_reserved)
    if not private:
        return
    actual = [queue_delay_s(j) or 0.0 for j in started if j.job_id in private]
    rep.private_queue_s = sum(private.values()) / len(private)
    rep.excess_queue_s = sum(actual) / len(actual) - rep.private_queue_s


def _totals(
    vcs: list[VCReport], gpus: int, window_h: float, segments: list[RunSegment], until: datetime
) -> ClusterTotals:
    names = {v.name for v in vcs}
    qos: dict[str, ClassRate] = {c: ClassRate() for c in GUARANTEED_CLASSES}
    for v in vcs:
        for cls, r in v.qos.items():
            qos.setdefault(cls, ClassRate())
            qos[cls].met += r.met
            qos[cls].total += r.total
    guaranteed = sum(v.gpu_hours_guaranteed for v in vcs)
    opportunistic = sum(v.gpu_hours_opportunistic for v in vcs)
    capacity = gpus * window_h
    lent_now = sum(
        s.gpus for s in segments if s.opportunistic and s.end is None and s.start <= until and s.vc in names
    )
    return ClusterTotals(
        gpus=gpus,
        window_hours=window_h,
        gpu_hours_capacity=capacity,
        gpu_hours_guaranteed=guaranteed,
        gpu_hours_opportunistic=opportunistic,
        utilization=(guaranteed + opportunistic) / capacity if capacity else None,
        jobs_run=sum(v.jobs_run for v in vcs),
        jobs_pending=sum(v.jobs_pending for v in vcs),
        qos=qos,
        missed_ect=sum(v.missed_ect for v in vcs),
        preempted_gpu_hours=sum(v.preempted_gpu_hours for v in vcs),
        preemptions=sum(v.preemptions for v in vcs),
        gpus_lent_now=lent_now,
    )
