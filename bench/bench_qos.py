"""Figures for the QoS model: prediction error of both forms per profile file, and planning speed.

Usage:  .venv/bin/python bench/bench_qos.py [DATA_DIR] [--tasks N]

DATA_DIR holds <model>/placements-<cluster>.csv (+ scalability-<cluster>.csv); default: the
HIVEBATCH_PROFILE_DATA environment variable, else ../shared/data/profiles next to the project.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from hivebatch.errors import HivebatchError  # noqa: E402
from hivebatch.qos import (  # noqa: E402
    POLICY_NAMES,
    ModelRangeError,
    Platform,
    Profile,
    ProfileStore,
    Sample,
    SampleSet,
    Task,
    get_policy,
    predict_throughput,
    read_profile_csv,
)
from hivebatch.qos.fitting import FITTERS, fit_form, split_holdout  # noqa: E402
from hivebatch.qos.perfmodel import throughput_grid  # noqa: E402


@dataclass
class Errors:
    """Relative throughput errors of predicted rows, and the rows the model would not answer."""

    errs: list[float] = field(default_factory=list)
    refused: int = 0
    nonpositive: int = 0

    def add(self, profile: Profile, rows: list[Sample]) -> None:
        for s in rows:
            try:
                pr = predict_throughput(profile, s.local_batch * s.shape.gpus, s.shape)
            except ModelRangeError as exc:
                self.refused += 1
                self.nonpositive += "<= 0" in str(exc) or "non-positive" in str(exc)
                continue
            self.errs.append(abs(pr / s.throughput - 1.0))

    @property
    def mape(self) -> float:
        # a refused row counts as a 100% miss, as in hivebatch.qos.mape
        n = len(self.errs) + self.refused
        return 100.0 * (sum(self.errs) + self.refused) / n if n else float("nan")


def _fit(form: str, rows: list[Sample]) -> Profile:
    if form == "uncorrected":  # the default form without its measured correction
        return Profile("m", "g", "default", FITTERS["default"](rows))
    return fit_form(form, rows)


def file_errors(place: SampleSet, scal: SampleSet | None, form: str) -> dict[str, Errors]:
    """Holdout (70/30, seed 0), leave-one-batch-size-out and leave-one-shape-out errors of ``form``.

    The scalability rows train every fit except that rows of the held-out batch size or shape are
    left out of it too, so nothing about the held-out point leaks in.
    """
    base, extra = place.samples, (scal.samples if scal else [])
    out = {"holdout": Errors(), "lobo": Errors(), "loso": Errors()}
    train, test = split_holdout(base, 0.3, 0)
    out["holdout"].add(_fit(form, train + extra), test)
    for batch in sorted({s.local_batch for s in base}):
        rest = [s for s in base + extra if s.local_batch != batch]
        out["lobo"].add(_fit(form, rest), [s for s in base if s.local_batch == batch])
    for shape in sorted({s.shape for s in base}):
        rest = [s for s in base + extra if s.shape != shape]
        try:
            prof = _fit(form, rest)
        except HivebatchError:  # the paper form cannot fit without its one-GPU rows
            out["loso"].refused += sum(s.shape == shape for s in base)
            continue
        out["loso"].add(prof, [s for s in base if s.shape == shape])
    return out


def shape_space_failures(profile: Profile, nodes: int = 64, gpn: int = 8) -> int:
    """Queries anywhere in a nodes x gpn cluster (local batch 1..1e5) the model cannot answer."""
    bad = 0
    for w in np.geomspace(1, 1e5, 41):
        for n in range(1, nodes + 1):
            for k in range(1, gpn + 1):
                pr = throughput_grid(profile, float(w) * n * k, np.array([n]), np.array([k]))[0]
                bad += not np.isfinite(pr)
    return bad


def mape_table(data: Path) -> None:
    files = sorted(data.glob("*/placements-*.csv"))
    if not files:
        print(f"no placements-*.csv under {data}")
        return
    print("throughput MAPE (%) per profile file: holdout 70/30 seed 0, leave-one-batch-size-out,")
    print("leave-one-shape-out; ref = rows refused (non-positive in brackets), space = queries in a")
    print("64-node x 8-GPU cluster at local batch 1..1e5 the full-data fit cannot answer; med = median")
    print("row error of the default form's holdout. The default form includes its measured per-shape and")
    print("per-batch correction; 'form alone' rows give the same errors without it")
    head = f"{'file':30s} | {'default: hold':>13s} {'lobo':>6s} {'loso':>6s} {'med':>5s} {'ref':>5s} {'space':>5s}"
    print(head + f" | {'paper: hold':>11s} {'lobo':>6s} {'loso':>6s} {'ref':>8s} {'space':>5s}")
    table: dict[str, list[float]] = {k: [] for k in ("dh", "dl", "ds", "ph", "pl", "ps", "uh", "ul", "us")}
    for f in files:
        place = read_profile_csv(f)
        sf = f.with_name(f.name.replace("placements", "scalability"))
        scal = read_profile_csv(sf) if sf.exists() else None
        cells = []
        for form in ("default", "paper"):
            e = file_errors(place, scal, form)
            full = _fit(form, place.samples + (scal.samples if scal else []))
            refused = sum(x.refused for x in e.values())
            nonpos = sum(x.nonpositive for x in e.values())
            cells.append((e, refused, nonpos, shape_space_failures(full)))
            for k, part in zip(("h", "l", "s"), ("holdout", "lobo", "loso"), strict=True):
                table[form[0] + k].append(e[part].mape)
        (d, dref, dnp, dsp), (p, pref, pnp, psp) = cells
        u = file_errors(place, scal, "uncorrected")
        for k, part in zip(("uh", "ul", "us"), ("holdout", "lobo", "loso"), strict=True):
            table[k].append(u[part].mape)
        med = 100 * statistics.median(d["holdout"].errs)
        print(
            f"{f.parent.name + '/' + f.name:30s} | {d['holdout'].mape:13.2f} {d['lobo'].mape:6.2f} "
            f"{d['loso'].mape:6.2f} {med:5.2f} {f'{dref}({dnp})':>5s} {dsp:5d} | {p['holdout'].mape:11.2f} "
            f"{p['lobo'].mape:6.2f} {p['loso'].mape:6.2f} {f'{pref}({pnp})':>8s} {psp:5d}"
        )
    for label, fn in (("median", statistics.median), ("worst", max)):
        v = {k: fn(x) for k, x in table.items()}
        print(
            f"{label:30s} | {v['dh']:13.2f} {v['dl']:6.2f} {v['ds']:6.2f} {'':5s} {'':5s} {'':5s} | "
            f"{v['ph']:11.2f} {v['pl']:6.2f} {v['ps']:6.2f}"
        )
    for label, fn in (("median", statistics.median), ("worst", max)):
        v = {k: fn(x) for k, x in table.items()}
        print(f"{'form alone: ' + label:30s} | {v['uh']:13.2f} {v['ul']:6.2f} {v['us']:6.2f}")


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
    ap.add_argument("--tasks", type=int, default=200)
    args = ap.parse_args()
    mape_table(args.data_dir)
    planning_speed(args.tasks)


if __name__ == "__main__":
    main()
