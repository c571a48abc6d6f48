"""Simulator figures.

  speed     (default) a 100,000-job synthetic trace on 256 nodes x 8 GPUs (target: <= 60 s): wall
            time, events, scheduling rounds, peak resident memory.
  makespan  the QoS paper's workload (one VC, 4 x 4 GPUs) at 5/10/20 jobs per hour, seeds 1-3, every
            policy: makespan over its lower bound (see hivebatch.sim.metrics), QoS rate and its
            ceiling (the jobs that can meet their ECT at all), and whether qos stays within 1.10 x the
            bound, never behind the best baseline, and ahead on QoS rate or at the ceiling.
  philly    the Philly trace (or a slice of it) with each VC sized by --target-load: per-VC excess
            queuing delay over the VC's private cluster in cells and in quota mode.

Usage: python bench/bench_sim.py [speed|makespan|philly] [options]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hivebatch.config import read_yaml  # noqa: E402
from hivebatch.qos import POLICY_NAMES, QosSettings  # noqa: E402
from hivebatch.sim import setup, traces  # noqa: E402
from hivebatch.sim.engine import Simulation  # noqa: E402
from hivebatch.sim.metrics import RunSummary, summarize  # noqa: E402
from hivebatch.sim.resize import Resizing  # noqa: E402
from hivebatch.sim.runner import Experiment, run_all  # noqa: E402
from hivebatch.sim.scaling import fit_vc_nodes  # noqa: E402
from hivebatch.sim.workload import paper_workload, synthetic_trace  # noqa: E402

DATA = Path(os.environ.get("HIVEBATCH_TRACE_DATA") or ROOT.parent / "shared" / "data" / "traces")
BASELINES = ("fifo", "capacity", "minmin", "wfs", "tetris-perf", "tetris-cer")


def speed(args: argparse.Namespace) -> None:
    per_vc = args.nodes // args.vcs
    vc_nodes = {f"vc{i}": per_vc for i in range(args.vcs)}
    vc_nodes["vc0"] += args.nodes - per_vc * args.vcs
    t0 = time.perf_counter()
    spec = setup.build_spec(setup.node8_config(vc_nodes))
    qos = QosSettings()
    platform = setup.build_platform(spec, qos)
    runtime = setup.build_runtime(spec, platform, qos)
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


def makespan(args: argparse.Namespace) -> None:
    data = setup.single_vc_config(read_yaml(setup.paper_config_path()))
    spec = setup.build_spec(data)
    qos = setup.qos_settings(data, setup.paper_config_path().parent)
    platform = setup.build_platform(spec, qos)
    if args.keep_free is not None:
        platform = dataclasses.replace(platform, keep_free_gpus=args.keep_free)
    resizing = Resizing(args.resize_cost) if args.resize_cost is not None else None
    runtime = setup.build_runtime(spec, platform, qos)
    vc_gpus = {vc: spec.vc_gpus(vc) for vc in spec.vcs}
    print("paper workload, 4 x 4 GPUs, one VC, 24 h of Poisson arrivals, cells mode")
    print(f"qos keeps {platform.kept_free} GPUs free for arrivals (qos.keep_free_gpus)")
    if resizing is not None:
        print(
            f"qos's runs are resizable, {resizing.cost_s:g} s a resize (hivebatch.sim.resize: simulated only, "
            "the controller cannot resize a job); the other policies' are not"
        )
    print("ratio = makespan / max(max(arrival + fastest run), sum of least GPU time / GPUs)")
    for rate in args.rates:
        by: dict[str, list[RunSummary]] = {p: [] for p in POLICY_NAMES}
        for seed in args.seeds:
            jobs = paper_workload(rate, 24.0, seed, vc_gpus, 0.0)
            exp = Experiment(spec, jobs, runtime, platform, private_baseline=False)
            runs = run_all(dataclasses.replace(exp, resizing=resizing), ["qos"], ["cells"])
            runs += run_all(exp, [p for p in POLICY_NAMES if p != "qos"], ["cells"])
            for r in runs:
                by[r.policy].append(r)
        print(f"\nrate {rate:g}/h, seeds {','.join(map(str, args.seeds))}")
        print(
            f"  {'policy':12s} {'ratio':>6s} {'per seed':>18s} {'bound h':>8s} {'QoS rate':>9s} {'per seed':>18s}"
        )
        for p, rs in by.items():
            ratios = [r.makespan_ratio for r in rs]
            per = " ".join(f"{x:.2f}" for x in ratios)
            rates = " ".join(f"{100 * r.qos_rate:.1f}" for r in rs)
            print(
                f"  {p:12s} {statistics.mean(ratios):6.3f} {per:>18s} "
                f"{statistics.mean(r.makespan_bound_s for r in rs) / 3600:8.2f} "
                f"{100 * statistics.mean(r.qos_rate for r in rs):8.1f}% {rates:>18s}"
            )
        q = by["qos"]
        ceiling = " ".join(f"{100 * r.qos_ceiling:.1f}" for r in q)
        print(
            f"  {'ceiling':12s} {'':6s} {'':>18s} {'':8s} {100 * statistics.mean(r.qos_ceiling for r in q):8.1f}% {ceiling:>18s}"
        )
        best_base = [min(by[b][i].makespan_s for b in BASELINES) for i in range(len(q))]
        within = all(r.makespan_ratio <= 1.10 for r in q)
        not_behind = all(r.makespan_s <= b + 1e-6 for r, b in zip(q, best_base, strict=True))
        # where every job that can meet its ECT at all meets it, no policy can be ahead: at the ceiling counts
        qos_ahead = all(
            q[i].qos_rate > max(by[b][i].qos_rate for b in BASELINES)
            or q[i].qos_rate >= q[i].qos_ceiling - 1e-9
            for i in range(len(q))
        )
        print(
            f"  qos <= 1.10 x bound every seed: {'yes' if within else 'NO'};  "
            f"never behind the best baseline's makespan: {'yes' if not_behind else 'NO'};  "
            f"QoS rate ahead of every baseline or at the ceiling every seed: {'yes' if qos_ahead else 'NO'}"
        )


def philly(args: argparse.Namespace) -> None:
    vc_nodes = traces.read_vcs(args.vcs)
    jobs, report = traces.read_philly(args.trace, {v: n * 8 for v, n in vc_nodes.items()})
    lo, hi = (float(x) * 86400 for x in args.days.split(":"))
    first = min(j.arrival for j in jobs)
    jobs = [j for j in jobs if lo <= j.arrival - first < hi]
    for j in jobs:
        j.arrival -= first + lo
    scaling = fit_vc_nodes(jobs, vc_nodes, args.target_load)
    print(report.summary())
    print(f"days {args.days} of the trace: {len(jobs)} jobs")
    print(scaling.summary())
    data = setup.node8_config(scaling.vc_nodes())
    spec = setup.build_spec(data)
    qos = setup.qos_settings(data, None)
    platform = setup.build_platform(spec, qos)
    runtime = setup.build_runtime(spec, platform, qos)
    t0 = time.perf_counter()
    cells, quota = run_all(Experiment(spec, jobs, runtime, platform), [args.policy], ["cells", "quota"])
    print(f"policy {args.policy}; simulated in {time.perf_counter() - t0:.0f} s")
    for r in (cells, quota):
        print(
            f"  {r.mode:5s} utilization {100 * r.utilization:.1f}%  mean queue {r.avg_queue_s / 60:.1f} min"
        )
    n = Counter(j.vc for j in jobs)
    multi = Counter(j.vc for j in jobs if j.gpus > 1)
    print(f"\n{'VC':8s} {'jobs':>5s} {'multi':>5s} {'nodes':>5s} {'load':>5s} | {'cells: private':>14s} "
          f"{'excess':>8s} | {'quota: private':>14s} {'excess':>8s}   (minutes)")  # fmt: skip
    loads = {v.vc: v.load_after for v in scaling.vcs}
    for vc in sorted(n):
        c, q = cells.vcs.get(vc, {}), quota.vcs.get(vc, {})
        print(
            f"{vc:8s} {n[vc]:5d} {multi[vc]:5d} {scaling.vc_nodes()[vc]:5d} {loads[vc]:5.0%} | "
            f"{c.get('private_avg_queue_s', 0) / 60:14.1f} {c.get('excess_queue_s', 0) / 60:+8.1f} | "
            f"{q.get('private_avg_queue_s', 0) / 60:14.1f} {q.get('excess_queue_s', 0) / 60:+8.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what")
    sp = sub.add_parser("speed")
    for a in (ap, sp):  # "speed" is also the default without a sub-command
        a.add_argument("--jobs", type=int, default=100_000)
        a.add_argument("--nodes", type=int, default=256)
        a.add_argument("--vcs", type=int, default=8)
        a.add_argument("--policy", default="qos")
        a.add_argument("--mode", default="cells", choices=["cells", "quota"])
        a.add_argument("--load", type=float, default=0.7)
        a.add_argument("--seed", type=int, default=1)
    mp = sub.add_parser("makespan")
    mp.add_argument("--rates", type=float, nargs="+", default=[5.0, 10.0, 20.0])
    mp.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    mp.add_argument("--keep-free", type=int, default=None, help="qos.keep_free_gpus (default: one node's)")
    mp.add_argument(
        "--resize-cost",
        type=float,
        default=None,
        help="seconds: qos's runs grow and shrink at this cost (simulated only)",
    )
    pp = sub.add_parser("philly")
    pp.add_argument("--trace", default=str(DATA / "philly-sep-dec.csv"))
    pp.add_argument("--vcs", default=str(DATA / "philly-vcs.csv"))
    pp.add_argument("--target-load", type=float, default=0.7)
    pp.add_argument("--days", default="0:1000", help="FROM:TO, days after the first arrival")
    pp.add_argument("--policy", default="fifo")
    args = ap.parse_args()
    {"makespan": makespan, "philly": philly}.get(args.what or "speed", speed)(args)


if __name__ == "__main__":
    main()
