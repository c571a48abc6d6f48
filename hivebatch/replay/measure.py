"""Figures of a live replay from Slurm's own accounting, computed by the simulator's metric code.

Each replayed job keeps the simulator's record of it (its deadline, reference latency, bounds) and
gets the times Slurm measured instead of the simulated ones, scaled back to trace seconds; then
``hivebatch.sim.metrics.summarize`` gives the same figures it gives a simulated run, so the two sides
of the comparison are computed one way.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from hivebatch.replay.plan import Plan
from hivebatch.sim.engine import JobRecord, SimRun
from hivebatch.sim.metrics import RunSummary, summarize
from hivebatch.slurm.types import AcctRecord

NAME_PREFIX = "hbreplay"


def job_name(mode: str, job_id: str) -> str:
    """The Slurm job name of a replayed job: how its accounting row is found again."""
    return f"{NAME_PREFIX}-{mode}-{job_id}"


def measured_records(sim: SimRun, rows: list[AcctRecord], plan: Plan, mode: str) -> list[JobRecord]:
    """The simulator's records of the plan's jobs with Slurm's submit, start and end times (trace seconds).

    ``rows`` holds every run of a job, oldest first (``sacct --duplicates``): a preempted job's runs
    before its last count as preemptions, and its wait runs from its first submission, since Slurm
    gives each run after a requeue a submit time of its own. A job's wait is counted from its real
    submission, so a late submission does not count as waiting."""
    runs: dict[str, list[AcctRecord]] = {}
    for r in rows:
        runs.setdefault(r.name, []).append(r)
    speedup = plan.spec.speedup
    out: list[JobRecord] = []
    for rec in sim.records:
        mine = runs.get(job_name(mode, rec.job.job_id), [])
        fresh = replace(
            rec,
            start=None,
            first_start=None,
            end=None,
            run_s=0.0,
            placement={},
            preemptions=0,
            lost_gpu_s=0.0,
        )
        row = mine[-1] if mine else None
        submitted = mine[0].submit_time if mine else None
        if (
            row is not None
            and row.state == "COMPLETED"
            and submitted is not None
            and row.start_time is not None
            and row.end_time is not None
        ):
            first = mine[0].start_time or row.start_time
            fresh.first_start = rec.job.arrival + (first - submitted).total_seconds() * speedup
            fresh.start = rec.job.arrival + (row.start_time - submitted).total_seconds() * speedup
            fresh.run_s = (row.end_time - row.start_time).total_seconds() * speedup
            fresh.end = fresh.start + fresh.run_s
            fresh.placement = {n: [] for n in row.nodes}
            fresh.preemptions = len(mine) - 1
            fresh.lost_gpu_s = sum(r.elapsed_s for r in mine[:-1]) * speedup * rec.job.gpus
        out.append(fresh)
    return out


@dataclass(frozen=True)
class JobError:
    """How far the prediction is from Slurm job by job: the mean absolute difference of each job's
    wait (trace seconds), over the jobs both completed, and the same per VC."""

    jobs: int
    mean_abs_s: float
    vcs: dict[str, float]

    def to_json(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "mean_abs_s": round(self.mean_abs_s, 3),
            "vcs": {vc: round(v, 3) for vc, v in sorted(self.vcs.items())},
        }


def job_error(predicted: list[JobRecord], measured: list[JobRecord]) -> JobError | None:
    """``predicted`` against ``measured`` job by job; None when no job completed on both sides.

    Mean waits can agree while the jobs do not: a class that waits too long in the prediction and
    another that starts too soon cancel in the mean, not here."""
    real = {r.job.job_id: r for r in measured if r.end is not None}
    diffs: dict[str, list[float]] = {}
    for p in predicted:
        m = real.get(p.job.job_id)
        if m is not None and p.end is not None:
            diffs.setdefault(p.job.vc, []).append(abs(p.queue_s - m.queue_s))
    every = [d for ds in diffs.values() for d in ds]
    if not every:
        return None
    return JobError(len(every), statistics.mean(every), {vc: statistics.mean(ds) for vc, ds in diffs.items()})


def measured_summary(
    sim: SimRun, rows: list[AcctRecord], plan: Plan, mode: str, private: dict[str, float] | None
) -> RunSummary:
    """The replay's figures per ``summarize``; jobs Slurm did not complete count as not completed."""
    return summary_of(sim, measured_records(sim, rows, plan, mode), mode, private)


def summary_of(
    sim: SimRun, records: list[JobRecord], mode: str, private: dict[str, float] | None
) -> RunSummary:
    """``summarize`` of ``measured_records``' output, for a caller that keeps the records too."""
    busy = sum(r.run_s * r.job.gpus for r in records if r.end is not None)
    run = replace(sim, mode=f"{mode} (slurm)", records=records, busy_gpu_s=busy)
    return summarize(run, private)
