"""Lost GPU-hours of a preempting workload: preempted at once (as before notices) against a notice
with the job's own signal and victims chosen by the work they lose.

    python bench/bench_preemption.py [--hours 168] [--seeds 1 2 3] [--notice 120] [--save 30]

The cluster: 4 nodes x 8 V100, VCs a (2 nodes), b and c (1 node each). Guaranteed jobs keep about half
of each VC busy, opportunistic jobs ask for 80% of the cluster on top; half of them checkpoint on the
notice's signal (hivebatch.sim.preempting). Lost GPU-hours: GPU time of runs cut short and not saved,
plus the time checkpointing jobs spend saving. The guaranteed jobs' mean wait shows what the notice
costs the jobs that preempt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hivebatch.qos import QosSettings  # noqa: E402
from hivebatch.sim import setup  # noqa: E402
from hivebatch.sim.engine import Simulation  # noqa: E402
from hivebatch.sim.notice import SimNotice  # noqa: E402
from hivebatch.sim.preempting import preempting_workload  # noqa: E402


def run(seed: int, hours: float, notice: SimNotice | None) -> tuple[float, int, float, float]:
    spec = setup.build_spec(setup.node8_config({"a": 2, "b": 1, "c": 1}))
    qos = QosSettings()
    platform = setup.build_platform(spec, qos)
    runtime = setup.build_runtime(spec, platform, qos)
    jobs = preempting_workload({vc: spec.vc_gpus(vc) for vc in spec.vcs}, hours=hours, seed=seed)
    result = Simulation(spec, jobs, "fifo", "cells", runtime, platform, notice=notice).run()
    lost_h = sum(r.lost_gpu_s for r in result.records) / 3600
    preemptions = sum(r.preemptions for r in result.records)
    waits = [r.queue_s / 60 for r in result.records if r.end is not None and not r.job.opportunistic]
    done_opp = sum(
        r.run_s * sum(len(g) for g in r.placement.values()) / 3600
        for r in result.records
        if r.end is not None and r.job.opportunistic
    )
    return lost_h, preemptions, statistics.fmean(waits) if waits else 0.0, done_opp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=168.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--notice", type=float, default=120.0)
    ap.add_argument("--save", type=float, default=30.0)
    args = ap.parse_args()
    variants = {
        "before: at once, any victim": None,
        "least-work victims only": SimNotice(notice_s=0, least_loss=True, save_s=args.save),
        "notice only": SimNotice(notice_s=args.notice, least_loss=False, save_s=args.save),
        "after: notice + least-work victims": SimNotice(
            notice_s=args.notice, least_loss=True, save_s=args.save
        ),
    }
    print(f"{args.hours:.0f} h of a preempting workload, seeds {args.seeds}, notice {args.notice:.0f} s")
    print(f"{'variant':38} {'lost GPU-h':>10} {'preemptions':>11} {'guaranteed wait min':>19}")
    for name, notice in variants.items():
        rows = [run(seed, args.hours, notice) for seed in args.seeds]
        lost = statistics.fmean(r[0] for r in rows)
        pre = statistics.fmean(r[1] for r in rows)
        wait = statistics.fmean(r[2] for r in rows)
        print(f"{name:38} {lost:10.1f} {pre:11.1f} {wait:19.2f}")


if __name__ == "__main__":
    main()
