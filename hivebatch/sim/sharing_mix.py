"""Replay a mix of whole-GPU, fractional and opportunistic jobs, with and without GPU sharing.

The same workload runs three times on the real cell core (``CellAllocator``) and the sharing ledger:

* ``exclusive`` — no sharing: a job that needs 6G of one GPU still holds a whole GPU, and
  opportunistic jobs take whole free GPUs;
* ``binpack`` — fractional jobs are slices binpacked inside their VC's cells (gpushare), opportunistic
  slices pack onto free GPUs;
* ``colocate`` — binpack plus opportunistic slices on the idle part of GPUs held by guaranteed jobs
  (AntMan), with a memory headroom, preempted first.

Scheduling is first come, first served with backfill; guaranteed jobs are tried before opportunistic
ones. A preempted job is requeued and starts over, as a Slurm requeue does. Run times are fixed per job
(sharing memory is assumed not to slow a job: isolation and interference are the application's).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hivebatch.cells import parse_cluster_config
from hivebatch.cells.allocator import CellAllocator
from hivebatch.cells.types import Request
from hivebatch.sharing import GpuUse, SharingLedger, account, parse_sharing_config
from hivebatch.sharing.memory import shard_rounded_mib

MODES = ("exclusive", "binpack", "colocate")
KINDS = ("whole", "slice", "opp")
GiB = 1024


@dataclass(frozen=True)
class MixJob:
    job_id: str
    vc: str
    kind: str  # whole | slice | opp
    arrival_s: float
    duration_s: float
    gpus: int
    mem_mib: int  # per GPU: the slice, or what a whole-GPU job really uses (declared with --gpu-mem)


def lab_cluster() -> dict[str, Any]:
    """The lab's 4 nodes × 8 V100 (32G) with three VCs, as in etc/hivebatch.example.yaml."""
    return {
        "cluster": {
            "cell_types": {
                "V100": {"memory": "32G"},
                "V100-SWITCH": {"child": "V100", "count": 2},
                "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
                "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
            },
            "physical_cells": [{"type": "V100-NODE", "nodes": [f"node{i}"]} for i in (1, 2, 3, 4)],
        },
        "virtual_clusters": {
            "cv": {"cells": {"V100-NODE": 1, "V100-SOCKET": 1}},
            "nlp": {"cells": {"V100-NODE": 2}},
            "sys": {"cells": {"V100-SWITCH": 1, "V100": 2}},
        },
    }


def sharing_workload(
    seed: int,
    hours: float,
    vc_gpus: dict[str, int],
    gpu_mem_mib: int = 32 * GiB,
    whole_per_h: float = 2.0,
    slice_per_h: float = 12.0,
    opp_per_h: float = 3.0,
) -> list[MixJob]:
    """Poisson arrivals of three kinds of jobs (rates per hour), VCs drawn by size.

    * whole: 1/2/4/8 GPUs (35/25/25/15 %), run time exponential with mean 3 h (10 min – 12 h), each GPU
      really using 25–100 % of its memory (AntMan saw most jobs far below the full memory);
    * slice: 2/4/6/8/12/16G of one GPU, mean 1 h (5 min – 6 h): debugging, inference, small fine-tunes;
    * opp: opportunistic slices of 4/8/12/16G, mean 2 h (10 min – 8 h).
    """
    rng = np.random.default_rng(seed)
    vcs = sorted(vc_gpus)
    weights = np.array([vc_gpus[v] for v in vcs], dtype=float)
    weights /= weights.sum()
    horizon = hours * 3600.0
    jobs: list[MixJob] = []

    def arrivals(rate: float) -> list[float]:
        t, out = 0.0, list[float]()
        while rate > 0:
            t += float(rng.exponential(3600.0 / rate))
            if t >= horizon:
                return out
            out.append(t)
        return out

    def dur(mean_h: float, lo_min: float, hi_h: float) -> float:
        return float(min(max(rng.exponential(mean_h * 3600.0), lo_min * 60.0), hi_h * 3600.0))

    for kind, rate in (("whole", whole_per_h), ("slice", slice_per_h), ("opp", opp_per_h)):
        for i, t in enumerate(arrivals(rate)):
            vc = str(rng.choice(vcs, p=weights))
            if kind == "whole":
                gpus = int(rng.choice([1, 2, 4, 8], p=[0.35, 0.25, 0.25, 0.15]))
                gpus = min(gpus, 1 << int(math.log2(vc_gpus[vc])))
                mem = shard_rounded_mib(int(gpu_mem_mib * float(rng.uniform(0.25, 1.0))))
                jobs.append(MixJob(f"w{i}", vc, kind, t, dur(3.0, 10, 12), gpus, min(mem, gpu_mem_mib)))
            elif kind == "slice":
                mem = int(rng.choice([2, 4, 6, 8, 12, 16])) * GiB
                jobs.append(MixJob(f"s{i}", vc, kind, t, dur(1.0, 5, 6), 1, mem))
            else:
                mem = int(rng.choice([4, 8, 12, 16])) * GiB
                jobs.append(MixJob(f"o{i}", vc, kind, t, dur(2.0, 10, 8), 1, mem))
    jobs.sort(key=lambda j: (j.arrival_s, j.job_id))
    return jobs


@dataclass
class _Run:
    job: MixJob
    start: float
    token: int
    placement: dict[str, list[int]]
    slice_mode: bool
    colocated: bool
    share: float  # GPU share per GPU for accounting


@dataclass
class MixResult:
    mode: str
    window_h: float
    done: dict[str, int] = field(default_factory=dict)
    submitted: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    mean_wait_min: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    mem_util_pct: float = 0.0  # GPU memory jobs really used, over all GPU memory
    held_pct: float = 0.0  # GPUs held by some job (whole or shared), over all GPUs
    work_util_pct: float = 0.0  # GPU-hours delivered (slices by their memory share) over capacity
    guaranteed_gpu_h: float = 0.0
    opportunistic_gpu_h: float = 0.0
    colocated_gpu_h: float = 0.0
    extra_capacity_pct: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "window_h": self.window_h,
            "submitted": self.submitted,
            "done": self.done,
            "rejected": self.rejected,
            "mean_wait_min": {k: round(v, 1) for k, v in self.mean_wait_min.items()},
            "preemptions": self.preemptions,
            "mem_util_pct": round(self.mem_util_pct, 1),
            "held_pct": round(self.held_pct, 1),
            "work_util_pct": round(self.work_util_pct, 1),
            "guaranteed_gpu_h": round(self.guaranteed_gpu_h, 1),
            "opportunistic_gpu_h": round(self.opportunistic_gpu_h, 1),
            "colocated_gpu_h": round(self.colocated_gpu_h, 1),
            "extra_capacity_pct": round(self.extra_capacity_pct, 1),
        }


def simulate_mix(
    data: dict[str, Any],
    jobs: list[MixJob],
    mode: str,
    window_s: float,
    headroom_mib: int = 2 * GiB,
    check: bool = False,
) -> MixResult:
    """Run ``jobs`` in ``mode``; figures are measured over [0, window_s). ``check`` verifies the ledger
    against the cell core after every instant (for tests)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    sim = _MixSim(data, jobs, mode, window_s, headroom_mib)
    sim.run(check)
    return sim.result()


class _MixSim:
    """One replay of a mix in one mode: the event loop and what it measures along the way."""

    def __init__(
        self, data: dict[str, Any], jobs: list[MixJob], mode: str, window_s: float, headroom_mib: int
    ) -> None:
        spec = parse_cluster_config(data)
        self.mode = mode
        self.window_s = window_s
        self.alloc = CellAllocator(spec)
        sharing: dict[str, Any] = {}
        if mode == "colocate":
            sharing = {
                "colocate": {"vcs": sorted(spec.vcs), "headroom_mib": headroom_mib, "max_jobs_per_gpu": 4}
            }
        self.led = SharingLedger(self.alloc, spec, parse_sharing_config({"sharing": sharing}))
        self.cap = self.led.gpu_capacity_mib(spec.gpu_types[0]) or 1
        self.total_gpus = spec.total_gpus()
        # time, order (0 end, 1 arrival), seq, job, token
        self.events: list[tuple[float, int, int, str, int]] = []
        self.by_id = {j.job_id: j for j in jobs}
        for seq, j in enumerate(jobs):
            heapq.heappush(self.events, (j.arrival_s, 1, seq, j.job_id, 0))
        self.queue: list[str] = []
        self.running: dict[str, _Run] = {}
        self.tokens: dict[str, int] = {}
        self.waits: dict[str, list[float]] = {k: [] for k in KINDS}
        self.done = dict.fromkeys(KINDS, 0)
        self.uses: list[GpuUse] = []
        self.mem_area = 0.0  # MiB·s really used
        self.held_area = 0.0  # GPU·s held in the cell core
        self.last_t = 0.0
        self.res = MixResult(mode=mode, window_h=window_s / 3600.0)
        self.res.submitted = {k: sum(1 for j in jobs if j.kind == k) for k in KINDS}

    def held_now(self) -> tuple[int, float]:
        gpus = sum(len(ix) for st in self.alloc.jobs().values() for ix in st.placement.values())
        mem = 0.0
        for r in self.running.values():
            mem += r.job.mem_mib * sum(len(ix) for ix in r.placement.values())
        return gpus, mem

    def advance(self, t: float) -> None:
        lo, hi = min(self.last_t, self.window_s), min(t, self.window_s)
        if hi > lo:
            g, m = self.held_now()
            self.held_area += g * (hi - lo)
            self.mem_area += m * (hi - lo)
        self.last_t = t

    def record(self, r: _Run, end: float) -> None:
        for node, idx in r.placement.items():
            for i in idx:
                self.uses.append(
                    GpuUse(
                        r.job.job_id,
                        r.job.vc,
                        node,
                        i,
                        r.share,
                        r.start,
                        end,
                        r.job.kind == "opp",
                        r.colocated,
                    )
                )

    def stop(self, jid: str, now: float, preempted: bool) -> list[str]:
        """Take a job off its GPUs; returns jobs requeued as a consequence."""
        r = self.running.pop(jid)
        self.record(r, now)
        self.tokens[jid] = self.tokens.get(jid, 0) + 1
        if r.slice_mode:
            if preempted:  # the ledger already dropped it
                return []
            return self.led.release(jid)
        if preempted:  # the cell core already released it
            return []
        self.alloc.release(jid)
        return self.led.release_whole_job(jid)

    def requeue(self, ids: list[str], now: float) -> None:
        for pid in ids:
            if pid in self.running:
                r = self.running.pop(pid)
                self.record(r, now)
                self.tokens[pid] = self.tokens.get(pid, 0) + 1
            self.res.preemptions += 1
            self.queue.append(pid)

    def start(self, jid: str, now: float) -> bool:
        """Try to start a queued job; True when it leaves the queue (started or rejected)."""
        j = self.by_id[jid]
        slice_mode = self.mode != "exclusive" and j.kind in ("slice", "opp")
        prio = -1 if j.kind == "opp" else 0
        placed = self._place_slice(j, now, prio) if slice_mode else self._place_whole(j, now, prio)
        if isinstance(placed, bool):
            return placed
        self.running[jid] = placed
        self.waits[j.kind].append(now - j.arrival_s)
        heapq.heappush(self.events, (now + j.duration_s, 0, 0, jid, placed.token))
        return True

    def _place_slice(self, j: MixJob, now: float, prio: int) -> _Run | bool:
        """The run of a slice the ledger placed; True when rejected, False when it must wait."""
        d = self.led.place(j.job_id, j.vc, j.mem_mib, prio)
        if d.result == "rejected":
            self.res.rejected += 1
            return True
        if d.result != "placed":
            return False
        self.requeue(d.preempted, now)
        token = self.tokens.get(j.job_id, 0)
        return _Run(j, now, token, d.placement, True, d.colocated, d.mem_mib / self.cap)

    def _place_whole(self, j: MixJob, now: float, prio: int) -> _Run | bool:
        """The run of whole GPUs the cell core placed; True when rejected, False when it must wait."""
        dec = self.alloc.allocate(Request(j.job_id, j.vc, j.gpus, None, None, None, prio))
        if dec.result == "rejected":
            self.res.rejected += 1
            return True
        if dec.result != "placed":
            return False
        self.requeue(self.led.translate_preempted(list(dec.preempted)), now)
        if self.mode == "colocate" and j.kind == "whole":
            self.led.note_whole_job(j.job_id, j.vc, prio, dec.placement, j.mem_mib)
        return _Run(j, now, self.tokens.get(j.job_id, 0), dict(dec.placement), False, False, 1.0)

    def run(self, check: bool) -> None:
        events, by_id = self.events, self.by_id
        while events:
            t = events[0][0]
            self.advance(t)
            while events and events[0][0] == t:
                _, order, _, jid, tok = heapq.heappop(events)
                if order == 0:
                    r = self.running.get(jid)
                    if r is None or r.token != tok:
                        continue  # a stale completion of a preempted run
                    self.requeue(self.stop(jid, t, preempted=False), t)
                    if t <= self.window_s:
                        self.done[by_id[jid].kind] += 1
                else:
                    self.queue.append(jid)
            # guaranteed first, then opportunistic; first come first served with backfill
            self.queue.sort(key=lambda q: (by_id[q].kind == "opp", by_id[q].arrival_s, q))
            self.queue[:] = [q for q in self.queue if not self.start(q, t)]
            if check:
                self.led.check_invariants()
                self.alloc.check_invariants()

    def result(self) -> MixResult:
        res, window_s, total_gpus = self.res, self.window_s, self.total_gpus
        res.done = self.done
        res.mean_wait_min = {k: (sum(v) / len(v) / 60.0 if v else 0.0) for k, v in self.waits.items()}
        acc = account(self.uses, 0.0, window_s, total_gpus)
        res.guaranteed_gpu_h = acc.total.guaranteed
        res.opportunistic_gpu_h = acc.total.opportunistic
        res.colocated_gpu_h = acc.total.colocated
        res.extra_capacity_pct = acc.extra_capacity_pct
        res.work_util_pct = acc.utilization_pct
        res.mem_util_pct = 100.0 * self.mem_area / (window_s * total_gpus * self.cap) if window_s else 0.0
        res.held_pct = 100.0 * self.held_area / (window_s * total_gpus) if window_s else 0.0
        return res


def compare(
    seed: int = 1, hours: float = 72.0, data: dict[str, Any] | None = None, **rates: float
) -> list[MixResult]:
    """The same workload in every mode, measured over the arrival window."""
    data = data or lab_cluster()
    spec = parse_cluster_config(data)
    vc_gpus = {v: spec.vc_gpus(v) for v in spec.vcs}
    mem = spec.gpu_memory_mib(spec.gpu_types[0]) or 32 * GiB
    jobs = sharing_workload(seed, hours, vc_gpus, mem, **rates)
    return [simulate_mix(data, jobs, m, hours * 3600.0) for m in MODES]


def average(results: list[MixResult]) -> MixResult:
    """The mean of several runs of one mode (counts become means too)."""
    n = len(results)
    out = MixResult(mode=results[0].mode, window_h=results[0].window_h)
    for k in KINDS:
        out.done[k] = round(sum(r.done.get(k, 0) for r in results) / n)
        out.submitted[k] = round(sum(r.submitted.get(k, 0) for r in results) / n)
        out.mean_wait_min[k] = sum(r.mean_wait_min.get(k, 0.0) for r in results) / n
    out.rejected = round(sum(r.rejected for r in results) / n)
    out.preemptions = round(sum(r.preemptions for r in results) / n)
    for name in (
        "mem_util_pct",
        "held_pct",
        "work_util_pct",
        "guaranteed_gpu_h",
        "opportunistic_gpu_h",
        "colocated_gpu_h",
        "extra_capacity_pct",
    ):
        setattr(out, name, sum(getattr(r, name) for r in results) / n)
    return out


def format_table(results: list[MixResult]) -> str:
    head = (
        f"{'mode':<10} {'done w/s/o':>13} {'wait min w/s/o':>20} {'preempt':>7} "
        f"{'mem%':>6} {'held%':>6} {'work%':>6} {'coloc GPU-h':>11} {'extra%':>6}"
    )
    lines = [head]
    for r in results:
        done = "/".join(str(r.done.get(k, 0)) for k in KINDS)
        wait = "/".join(f"{r.mean_wait_min.get(k, 0.0):.0f}" for k in KINDS)
        lines.append(
            f"{r.mode:<10} {done:>13} {wait:>20} {r.preemptions:>7} {r.mem_util_pct:>6.1f} "
            f"{r.held_pct:>6.1f} {r.work_util_pct:>6.1f} {r.colocated_gpu_h:>11.1f} {r.extra_capacity_pct:>6.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m hivebatch.sim.sharing_mix", description=__doc__.splitlines()[0]
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", type=int, default=1, help="average over this many seeds from --seed on")
    p.add_argument("--hours", type=float, default=72.0)
    p.add_argument("--whole-per-h", type=float, default=2.0)
    p.add_argument("--slice-per-h", type=float, default=12.0)
    p.add_argument("--opp-per-h", type=float, default=3.0)
    p.add_argument("--json", action="store_true", help="one JSON object per mode")
    a = p.parse_args(argv)
    runs = [
        compare(seed, a.hours, whole_per_h=a.whole_per_h, slice_per_h=a.slice_per_h, opp_per_h=a.opp_per_h)
        for seed in range(a.seed, a.seed + max(1, a.seeds))
    ]
    results = [average([r[i] for r in runs]) for i in range(len(MODES))]
    if a.json:
        for r in results:
            print(json.dumps(r.as_dict(), sort_keys=True))
    else:
        print(format_table(results))


if __name__ == "__main__":
    main()
