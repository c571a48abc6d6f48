"""Figures of one simulated run: QoS rate, makespan, JCT, queuing delay, normalised latency, utilisation,
and per VC the queuing delay against the VC's private-cluster baseline (the sharing anomaly).

Makespan is also given as a ratio to a lower bound no schedule can beat (times from the first
arrival, over the jobs that completed):

    bound = max( max over jobs of (arrival + fastest run on any placement),   arrival bound
                 Σ least GPU time of each job on any placement / GPUs )       work bound
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hivebatch.sim.engine import JobRecord, SimRun


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


@dataclass
class RunSummary:
    policy: str
    mode: str
    jobs: int
    completed: int
    rejected: int
    qos_rate: float
    makespan_s: float
    avg_jct_s: float
    avg_queue_s: float
    avg_norm_latency: float
    utilization: float
    preemptions: int
    vcs: dict[str, dict[str, float]]
    makespan_bound_s: float = 0.0
    # the share of jobs that could end by their ECT at all (started on arrival on their fastest
    # placement): no policy's QoS rate can pass it
    qos_ceiling: float = 0.0
    completion_times: list[float] = field(default_factory=list, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan_ratio(self) -> float:
        """Makespan over its lower bound (1.0 = no schedule could finish sooner)."""
        return self.makespan_s / self.makespan_bound_s if self.makespan_bound_s > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "mode": self.mode,
            "jobs": self.jobs,
            "completed": self.completed,
            "rejected": self.rejected,
            "qos_rate": round(self.qos_rate, 6),
            "qos_ceiling": round(self.qos_ceiling, 6),
            "makespan_s": round(self.makespan_s, 3),
            "makespan_bound_s": round(self.makespan_bound_s, 3),
            "makespan_ratio": round(self.makespan_ratio, 6),
            "avg_jct_s": round(self.avg_jct_s, 3),
            "avg_queue_s": round(self.avg_queue_s, 3),
            "avg_norm_latency": round(self.avg_norm_latency, 6),
            "utilization": round(self.utilization, 6),
            "preemptions": self.preemptions,
            "vcs": self.vcs,
        }
        out.update(self.extra)
        return out


def vc_queue_means(records: list[JobRecord], opportunistic: bool = False) -> dict[str, tuple[int, float]]:
    """VC -> (completed jobs, mean queuing delay) over its guaranteed jobs (or its opportunistic ones)."""
    by_vc: dict[str, list[float]] = {}
    for r in records:
        if r.end is not None and r.job.opportunistic == opportunistic:
            by_vc.setdefault(r.job.vc, []).append(r.queue_s)
    return {vc: (len(q), _mean(q)) for vc, q in by_vc.items()}


def summarize(run: SimRun, private: dict[str, float] | None = None) -> RunSummary:
    """``private``: VC -> mean queuing delay when the VC runs alone on exactly its own cells."""
    done = [r for r in run.records if r.end is not None]
    rejected = sum(1 for r in run.records if r.rejected)
    jobs = len(run.records)
    first = min((r.job.arrival for r in run.records), default=0.0)
    if done:
        last = max(r.end for r in done if r.end is not None)
        makespan = last - first
    else:
        makespan = 0.0
    met = sum(1 for r in done if r.met_qos)
    can_meet = sum(
        1 for r in run.records if r.rejected is None and r.job.arrival + r.best_s <= r.expected_end + 1e-6
    )
    arrival_bound = max((r.job.arrival - first + r.best_s for r in done), default=0.0)
    work_bound = sum(r.min_gpu_s for r in done) / run.total_gpus if run.total_gpus else 0.0
    util = run.busy_gpu_s / (run.total_gpus * makespan) if makespan > 0 and run.total_gpus else 0.0
    # Per VC: the guaranteed jobs, whose queuing delay is what the VC's cells promise; opportunistic
    # jobs are counted apart (they have no claim on any cell).
    vcs: dict[str, dict[str, float]] = {}
    for vc, (n, q) in sorted(vc_queue_means(run.records).items()):
        entry: dict[str, float] = {"jobs": n, "avg_queue_s": round(q, 3)}
        if private is not None and vc in private:
            entry["private_avg_queue_s"] = round(private[vc], 3)
            entry["excess_queue_s"] = round(q - private[vc], 3)
        vcs[vc] = entry
    for vc, (n, q) in sorted(vc_queue_means(run.records, opportunistic=True).items()):
        entry = vcs.setdefault(vc, {"jobs": 0, "avg_queue_s": 0.0})
        entry["opportunistic_jobs"] = n
        entry["opportunistic_avg_queue_s"] = round(q, 3)
    return RunSummary(
        policy=run.policy,
        mode=run.mode,
        jobs=jobs,
        completed=len(done),
        rejected=rejected,
        qos_rate=met / jobs if jobs else 0.0,
        qos_ceiling=can_meet / jobs if jobs else 0.0,
        makespan_s=makespan,
        avg_jct_s=_mean([r.end - r.job.arrival for r in done if r.end is not None]),
        avg_queue_s=_mean([r.queue_s for r in done]),
        avg_norm_latency=_mean(
            [(r.end - r.job.arrival) / r.ref_s for r in done if r.end is not None and r.ref_s > 0]
        ),
        utilization=util,
        preemptions=sum(r.preemptions for r in run.records),
        vcs=vcs,
        makespan_bound_s=max(arrival_bound, work_bound),
        completion_times=sorted(r.end - first for r in done if r.end is not None),
    )
