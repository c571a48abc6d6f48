"""How long one call of each Slurm backend query takes on the running lab (a controller cycle makes each once).

eval "$(scripts/slurm-lab env)"; .venv/bin/python bench/bench_slurm_backend.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from hivebatch.slurm import get_backend


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    times = []
    result: object = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, max(times) * 1000, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    be = get_backend()
    print(f"backend: {be.name}")
    for label, fn in (
        ("list_jobs (squeue --json)", be.list_jobs),
        ("list_nodes (sinfo --json)", be.list_nodes),
        ("history (sacct, all jobs)", be.history),
    ):
        med, worst, res = timed(fn, args.repeat)
        n = len(res) if isinstance(res, list) else 0
        print(f"{label:28s} median {med:7.1f} ms  max {worst:7.1f} ms  ({n} records)")


if __name__ == "__main__":
    main()
