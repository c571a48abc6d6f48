"""Figures for the QoS model: holdout MAPE of both forms per profile file, and planning speed.

Usage:  .venv/bin/python bench/bench_qos.py [DATA_DIR] [--seeds N] [--tasks N]

DATA_DIR holds <model>/placements-<cluster>.csv (+ scalability-<cluster>.csv); default: the
HIVEBATCH_PROFILE_DATA environment variable, else ../shared/data/profiles next to the project.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hivebatch.qos import (  # noqa: E402
    POLICY_NAMES,
    Platform,
    ProfileStore,
    Task,
    fit_profile,
    get_policy,
    read_profile_csv,
)


def mape_table(data: Path, seeds: int) -> None:
    files = sorted(data.glob("*/placements-*.csv"))
    if not files:
        print(f"no placements-*.csv under {data}")
        return
    print(
        f"holdout MAPE of throughput (%), 70/30 split of symmetric rows; seed 0 and mean over seeds 0..{seeds - 1}"
    )
    print(
        f"{'file':32s} {'default':>8s} {'paper':>8s} {'default~':>9s} {'paper~':>8s} {'rows':>5s} {'asym':>5s}"
    )
    cols: dict[str, list[float]] = {"d": [], "p": [], "dm": [], "pm": []}
    for f in files:
        place = read_profile_csv(f)
        sf = f.with_name(f.name.replace("placements", "scalability"))
        scal = read_profile_csv(sf) if sf.exists() else None
        per: dict[str, list[float]] = {"default": [], "paper": []}
        for seed in range(seeds):
            for form in per:
                res = fit_profile("m", "g", place, scal, form=form, holdout=0.3, seed=seed)
                assert res.mape_holdout is not None
                per[form].append(res.mape_holdout)
        row = (
            per["default"][0],
            per["paper"][0],
            statistics.mean(per["default"]),
            statistics.mean(per["paper"]),
        )
        for k, v in zip(cols, row, strict=True):
            cols[k].append(v)
        name = f"{f.parent.name}/{f.name}"
        print(
            f"{name:32s} {row[0]:8.2f} {row[1]:8.2f} {row[2]:9.2f} {row[3]:8.2f} {len(place.samples):5d} {place.skipped_asymmetric:5d}"
        )
    for label, fn in (("max", max), ("median", statistics.median)):
        vals = [fn(v) for v in cols.values()]
        print(f"{label:32s} {vals[0]:8.2f} {vals[1]:8.2f} {vals[2]:9.2f} {vals[3]:8.2f}")


def planning_speed(n_tasks: int) -> None:
    store = ProfileStore.load()
    models = [p for p in store.profiles() if p.gpu_type == "V100"]
    platform = Platform(max_nodes=4, gpus_per_node=8)
    classes = ("urgent", "prior", "normal")
    tasks = [
        Task(
            f"j{i}",
            ("cv", "nlp", "sys")[i % 3],
            classes[i % 3],
            float(i),
            model=models[i % len(models)],
            batch=64 * (1 + i % 4),
            iters=1000,
            gpus=1 + i % 4,
        )  # fmt: skip
        for i in range(n_tasks)
    ]
    limits = {"cv": 16, "nlp": 8, "sys": 8}
    print(f"\nplanning {n_tasks} waiting model tasks on a 4x8 cluster (32 candidate shapes each)")
    for name in POLICY_NAMES:
        policy = get_policy(name)
        t0 = time.perf_counter()
        reps = 3
        for _ in range(reps):
            policy.plan(tasks, 1000.0, platform, limits)
        dt = (time.perf_counter() - t0) / reps
        print(f"  {name:12s} {dt * 1000:8.1f} ms per round  ({dt / n_tasks * 1e6:6.0f} us per task)")


def main() -> None:
    ap = argparse.ArgumentParser()
    default = os.environ.get("HIVEBATCH_PROFILE_DATA") or str(ROOT.parent / "shared" / "data" / "profiles")
    ap.add_argument("data_dir", nargs="?", default=default, type=Path)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=200)
    args = ap.parse_args()
    mape_table(args.data_dir, args.seeds)
    planning_speed(args.tasks)


if __name__ == "__main__":
    main()
