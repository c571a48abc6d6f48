"""Simulator speed: a 100,000-job synthetic trace on 256 nodes x 8 GPUs (target: <= 60 s).

Usage: python bench/bench_sim.py [--jobs N] [--nodes N] [--policy qos] [--mode cells|quota]
Prints wall time, events, scheduling rounds and peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hivebatch.qos import QosSettings  # noqa: E402
from hivebatch.sim.engine import Simulation  # noqa: E402
from hivebatch.sim.metrics import summarize  # noqa: E402
from hivebatch.sim.setup import build_platform, build_runtime, build_spec, node8_config  # noqa: E402
from hivebatch.sim.workload import synthetic_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--vcs", type=int, default=8)
    ap.add_argument("--policy", default="qos")
    ap.add_argument("--mode", default="cells", choices=["cells", "quota"])
    ap.add_argument("--load", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    per_vc = args.nodes // args.vcs
    vc_nodes = {f"vc{i}": per_vc for i in range(args.vcs)}
    vc_nodes["vc0"] += args.nodes - per_vc * args.vcs
    t0 = time.perf_counter()
    spec = build_spec(node8_config(vc_nodes))
    qos = QosSettings()
    platform = build_platform(spec, qos)
    runtime = build_runtime(spec, platform, qos)
    jobs = synthetic_trace(args.jobs, args.seed, {vc: spec.vc_gpus(vc) for vc in spec.vcs}, load=args.load)
    t1 = time.perf_counter()
    sim = Simulation(spec, jobs, args.policy, args.mode, runtime, platform)
    run = sim.run()
    t2 = time.perf_counter()
    s = summarize(run)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"cluster            {args.nodes} nodes x 8 GPUs, {args.vcs} VCs, mode {args.mode}, policy {args.policy}"
    )
    print(f"jobs               {len(jobs)} (completed {s.completed}, rejected {s.rejected})")
    print(f"setup              {t1 - t0:.2f} s")
    print(f"simulation         {t2 - t1:.2f} s  (target <= 60 s)")
    print(f"events / rounds    {run.events} / {run.rounds}")
    print(f"peak memory (RSS)  {peak_mib:.0f} MiB")
    print(f"utilization        {100 * s.utilization:.1f}%   avg queue {s.avg_queue_s / 60:.1f} min")


if __name__ == "__main__":
    main()
