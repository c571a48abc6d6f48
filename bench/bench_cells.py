"""Cell core benchmark and soak.

    python bench/bench_cells.py                 # µs per allocate/release and peak memory, 64/256/1024 nodes
    python bench/bench_cells.py --nodes 256 --steps 10000
    python bench/bench_cells.py --soak 2000     # random configs x long sequences, invariants after every step

The cluster: N nodes of 8 V100 (node > 2 sockets > 2 switches > 2 GPUs) in racks of 4 nodes,
10 VCs of mixed shapes holding ~90% of the GPUs. The workload: 1/2/4/8-GPU jobs and 2-node jobs,
a fifth of them opportunistic, guaranteed priorities 0-2, releases of random running jobs.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from hivebatch.cells import CellAllocator, Request, parse_cluster_config  # noqa: E402


def lab_config(n_nodes: int, n_vcs: int = 10) -> dict[str, Any]:
    racks, rest = divmod(n_nodes, 4)
    physical = [
        {"type": "V100-RACK", "nodes": [f"node{4 * r + i + 1}" for i in range(4)]} for r in range(racks)
    ]
    physical += [{"type": "V100-NODE", "nodes": [f"node{4 * racks + i + 1}"]} for i in range(rest)]
    # per VC: a share of nodes as whole nodes, plus a rack when there are racks to spare, plus small cells
    per_vc_nodes = int(n_nodes * 0.85) // n_vcs
    vcs = {}
    for v in range(n_vcs):
        cells: dict[str, int] = {}
        nodes = per_vc_nodes
        if v % 3 == 0 and nodes >= 6:
            cells["V100-RACK"] = 1
            nodes -= 4
        cells["V100-NODE"] = max(nodes - 1, 0)
        cells["V100-SOCKET"] = 1
        cells["V100-SWITCH"] = 1
        cells["V100"] = 2
        vcs[f"vc{v}"] = {"cells": {k: n for k, n in cells.items() if n}}
    return {
        "cluster": {
            "cell_types": {
                "V100": {"memory": "32G"},
                "V100-SWITCH": {"child": "V100", "count": 2},
                "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
                "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
                "V100-RACK": {"child": "V100-NODE", "count": 4},
            },
            "physical_cells": physical,
        },
        "virtual_clusters": vcs,
    }


def workload(n_vcs: int, steps: int, seed: int) -> list[tuple[str, Any]]:
    rng = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    live: list[str] = []
    for i in range(steps):
        if live and (rng.random() < 0.45 or len(live) > 4000):
            ops.append(("release", live.pop(rng.randrange(len(live)))))
            continue
        jid = f"j{i}"
        r = rng.random()
        if r < 0.1:
            gpus, nodes = 16, 2
        else:
            gpus, nodes = rng.choice([1, 1, 2, 4, 8]), None
        prio = -1 if rng.random() < 0.2 else rng.choice([0, 0, 1, 2])
        ops.append(
            (
                "allocate",
                Request(job_id=jid, vc=f"vc{rng.randrange(n_vcs)}", gpus=gpus, nodes=nodes, priority=prio),
            )
        )
        live.append(jid)
    return ops


def fill(alloc: CellAllocator, n_vcs: int, seed: int) -> int:
    """Fill the cluster (untimed) with guaranteed and opportunistic jobs until requests stop fitting."""
    rng = random.Random(seed + 7)
    misses = placed = 0
    i = 0
    while misses < 50:
        prio = -1 if rng.random() < 0.2 else 0
        d = alloc.allocate(
            Request(
                job_id=f"fill{i}",
                vc=f"vc{rng.randrange(n_vcs)}",
                gpus=rng.choice([1, 2, 4, 8]),
                priority=prio,
            )
        )
        i += 1
        if d.result == "placed":
            placed += 1
            misses = 0
        else:
            misses += 1
    return placed


def run(n_nodes: int, steps: int, seed: int, n_vcs: int = 10, full: bool = False) -> dict[str, float]:
    spec = parse_cluster_config(lab_config(n_nodes, n_vcs))
    alloc = CellAllocator(spec)
    if full:
        fill(alloc, n_vcs, seed)
    ops = workload(n_vcs, steps, seed)
    t_alloc = t_rel = 0.0
    n_alloc = n_rel = placed = 0
    clock = time.process_time  # CPU time: other work on this machine does not inflate the figures
    for op, arg in ops:
        if op == "allocate":
            t0 = clock()
            d = alloc.allocate(arg)
            t_alloc += clock() - t0
            n_alloc += 1
            placed += d.result == "placed"
        else:
            t0 = clock()
            alloc.release(arg)
            t_rel += clock() - t0
            n_rel += 1
    alloc.check_invariants()
    used = sum(1 for row in alloc.gpu_map().values() for u in row.values() if u.job is not None)
    # memory: the allocator itself, built and driven under tracemalloc
    tracemalloc.start()
    a2 = CellAllocator(spec)
    for op, arg in ops[: min(2000, len(ops))]:
        if op == "allocate":
            a2.allocate(arg)
        else:
            a2.release(arg)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "nodes": n_nodes,
        "gpus": n_nodes * 8,
        "ops": len(ops),
        "us_per_op": 1e6 * (t_alloc + t_rel) / len(ops),
        "us_alloc": 1e6 * t_alloc / max(n_alloc, 1),
        "us_release": 1e6 * t_rel / max(n_rel, 1),
        "placed_pct": 100 * placed / max(n_alloc, 1),
        "busy_pct": 100 * used / (n_nodes * 8),
        "peak_mib": peak / 2**20,
    }


def soak(examples: int, steps: int) -> None:
    from test_cells_properties import run_sequence

    t0 = time.perf_counter()
    total: dict[str, int] = {}
    for seed in range(examples):
        for k, v in run_sequence(10_000 + seed, steps).items():
            total[k] = total.get(k, 0) + v
    print(
        f"soak: {examples} random configs x {steps} steps in {time.perf_counter() - t0:.1f} s, all invariants held; "
        + ", ".join(f"{k} {v}" for k, v in total.items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="*", default=[64, 256, 1024])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--soak", type=int, default=0, help="run the property soak over this many random configs")
    ap.add_argument("--soak-steps", type=int, default=400)
    args = ap.parse_args()
    if args.soak:
        soak(args.soak, args.soak_steps)
        return
    print("CPU time per operation (process time: other work on the machine does not count)")
    print(
        f"{'start':>6} {'nodes':>6} {'GPUs':>6} {'ops':>6} {'us/op':>8} {'alloc us':>9} {'release us':>11} "
        f"{'placed%':>8} {'busy%':>6} {'peak MiB':>9}"
    )
    for full in (False, True):
        for n in args.nodes:
            r = run(n, args.steps, args.seed, full=full)
            print(
                f"{'full' if full else 'empty':>6} {r['nodes']:>6} {r['gpus']:>6} {r['ops']:>6} {r['us_per_op']:>8.1f} "
                f"{r['us_alloc']:>9.1f} {r['us_release']:>11.1f} {r['placed_pct']:>8.1f} {r['busy_pct']:>6.1f} "
                f"{r['peak_mib']:>9.2f}"
            )


if __name__ == "__main__":
    main()
