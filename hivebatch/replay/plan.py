"""What a live replay submits: a slice of a trace, its VCs mapped onto the cluster's, and time compressed.

All times of the plan are *trace* seconds (what the simulator replays) except ``at_s`` and
``sleep_s``, which are the wall-clock seconds of the replay: a trace second lasts 1/speedup of a
real one. Run times are clamped so the replay stays short and every job outlives Slurm's own
latencies; the clamped durations are the ones the simulator replays too, so both see the same work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hivebatch.errors import HivebatchError
from hivebatch.sim.runtime import tightest_shape
from hivebatch.sim.traces import vc_by_hash
from hivebatch.sim.workload import SimJob


@dataclass(frozen=True)
class SliceSpec:
    start_s: float = 0.0  # trace seconds after the trace's first arrival
    length_s: float = 3600.0  # arrival window of the slice, trace seconds
    max_jobs: int | None = None  # only the first N jobs of the window
    speedup: float = 8.0  # trace seconds per real second
    min_run_s: float = 3.0  # real seconds: shorter jobs would be lost in Slurm's scheduling latency
    max_run_s: float = 60.0  # real seconds: longer jobs are cut, so the replay ends in time

    def check(self) -> None:
        if self.start_s < 0 or self.length_s <= 0:
            raise HivebatchError("the slice needs a start >= 0 and a length > 0")
        if self.speedup <= 0:
            raise HivebatchError("--speedup must be > 0")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise HivebatchError("--max-jobs must be >= 1")
        if not 0 < self.min_run_s <= self.max_run_s:
            raise HivebatchError("run times need 0 < --min-run <= --max-run")


def limit_min(sleep_s: float) -> int:
    """Slurm's time limit of a job sleeping ``sleep_s``: whole minutes, one more than the run needs (Slurm
    counts in minutes)."""
    return math.ceil(sleep_s / 60) + 1


@dataclass(frozen=True)
class PlannedJob:
    job: SimJob  # trace time, with the clamped duration
    at_s: float  # real seconds after the replay's start
    sleep_s: float  # real seconds the job sleeps, to a tenth
    nodes: int
    gpus_per_node: int

    @property
    def time_limit_min(self) -> int:
        return limit_min(self.sleep_s)


@dataclass
class Plan:
    jobs: list[PlannedJob]
    spec: SliceSpec
    mapped: int = 0  # jobs whose trace VC is not a VC of the cluster, given one by hash
    dropped: int = 0  # jobs larger than the VC they were mapped to
    clamped: int = 0  # jobs whose run time was raised or cut
    alone: str | None = None  # only this VC's jobs were kept (see ``only_vc``)

    @property
    def sim_jobs(self) -> list[SimJob]:
        return [p.job for p in self.jobs]

    @property
    def wall_s(self) -> float:
        """Real seconds from the first submission to the last arrival's end if it never waited."""
        return max((p.at_s + p.sleep_s for p in self.jobs), default=0.0)

    def summary(self) -> str:
        head = f"{len(self.jobs)} jobs over {self.wall_s:.0f} s at speedup {self.spec.speedup:g}"
        notes = []
        if self.mapped:
            notes.append(f"{self.mapped} given a VC by hash")
        if self.dropped:
            notes.append(f"{self.dropped} dropped (larger than their VC)")
        if self.clamped:
            notes.append(
                f"{self.clamped} run times clamped to {self.spec.min_run_s:g}-{self.spec.max_run_s:g} s real"
            )
        if self.alone is None:
            return "; ".join([head, *notes])
        # the counts are the whole slice's: the jobs were mapped and clamped before one VC's were kept
        whole = f"; of the whole slice: {', '.join(notes)}" if notes else ""
        return f"VC {self.alone} alone: {head}{whole}"

    def only_vc(self, vc: str) -> Plan:
        """The same plan with only ``vc``'s jobs, at the same times: the VC alone on its cells, which is
        what its private-cluster baseline simulates. Replayed live, it measures that baseline on Slurm,
        so a VC's excess in the whole slice can be told apart from what the scheduler does to the VC's
        own jobs on any cluster."""
        mine = [p for p in self.jobs if p.job.vc == vc]
        return replace(self, jobs=mine, alone=vc)


def select_slice(jobs: list[SimJob], spec: SliceSpec) -> list[SimJob]:
    """The jobs arriving in [start, start + length) of the trace, arrivals rebased to the slice's first."""
    spec.check()
    window = [j for j in jobs if spec.start_s <= j.arrival < spec.start_s + spec.length_s]
    window.sort(key=lambda j: (j.arrival, j.job_id))
    if spec.max_jobs is not None:
        window = window[: spec.max_jobs]
    if not window:
        return []
    t0 = window[0].arrival
    return [replace(j, arrival=j.arrival - t0) for j in window]


def plan_replay(
    jobs: list[SimJob], spec: SliceSpec, vc_gpus: dict[str, int], gpus_per_node: int, max_nodes: int
) -> Plan:
    """Map the slice's VCs onto ``vc_gpus``, clamp run times and compress time by ``spec.speedup``."""
    plan = Plan([], spec)
    lo, hi = spec.min_run_s * spec.speedup, spec.max_run_s * spec.speedup
    for j in select_slice(jobs, spec):
        vc = j.vc
        if vc not in vc_gpus:
            vc = vc_by_hash(j.job_id, vc_gpus)
            plan.mapped += 1
        if j.gpus > vc_gpus[vc]:
            plan.dropped += 1
            continue
        duration = float(j.duration_s or lo)
        clamped = min(max(duration, lo), hi)
        # tenths of a real second, and the simulator replays exactly that. Whole seconds made every run
        # end at the same instant of the controller's 2 s cycle at which it started, the instant Slurm
        # starts what the cycle released: on the lab that turned a rare race (a GPU freed between the
        # controller's look and Slurm's start) into one in 4 of a run's untyped pins
        sleep_s = max(1.0, round(clamped / spec.speedup, 1))
        if clamped != duration:
            plan.clamped += 1
        # the controller sees Slurm's time limit, not the run time: the simulator is told the same
        job = replace(
            j, vc=vc, duration_s=sleep_s * spec.speedup, time_limit_s=limit_min(sleep_s) * 60 * spec.speedup
        )
        shape = tightest_shape(j.gpus, gpus_per_node, max_nodes)
        plan.jobs.append(PlannedJob(job, j.arrival / spec.speedup, sleep_s, shape.d_node, shape.d_gpn))
    return plan
