"""What judging held jobs' dependencies costs a controller cycle: each ``singleton`` or whole-array
(``afterok:N_*``) dependency reads the records of its array or of its owner's job name among all
the records squeue lists.

    python bench/bench_dependency.py                       # 10,000 records, 1,000 dependent jobs
    python bench/bench_dependency.py --records 50000 --dependent 5000

Prints the time to judge every dependent job with the records indexed once for the cycle (as the
controller does) and, for comparison, indexed again for each job.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hivebatch.controller.decide.dependency import Listing, judge  # noqa: E402
from hivebatch.slurm.types import SlurmJob  # noqa: E402

NOW = dt.datetime(2026, 11, 27, 10, 0, tzinfo=dt.UTC)


def record(job_id: int, **kw: object) -> SlurmJob:
    return SlurmJob(job_id=job_id, name=str(kw.pop("name", f"j{job_id % 500}")), user=f"u{job_id % 50}",
                    account="cv", qos="normal", state=str(kw.pop("state", "PENDING")), reason="JobHeldUser",
                    **kw)  # type: ignore[arg-type]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--records", type=int, default=10_000, help="jobs squeue lists (half of them array tasks)"
    )
    ap.add_argument(
        "--dependent", type=int, default=1_000, help="held jobs with a dependency (1 in 10 singleton)"
    )
    args = ap.parse_args()
    tasks = args.records // 2
    records = {
        i: record(i, array_job_id=10**6 + i // 100, array_task_id=i % 100) if i <= tasks else record(i)
        for i in range(1, args.records + 1)
    }
    arrays = max(1, tasks // 100)
    dependent = [
        record(10**7 + k, dependency="singleton(unfulfilled)")
        if k % 10 == 0
        else record(10**7 + k, dependency=f"afterok:{10**6 + k % arrays}_*(unfulfilled)")
        for k in range(args.dependent)
    ]
    records.update((d.job_id, d) for d in dependent)

    t0 = time.perf_counter()
    listing = Listing(records)
    shared = [judge(d, listing, NOW) for d in dependent]
    t_shared = time.perf_counter() - t0
    t0 = time.perf_counter()
    each = [judge(d, records, NOW) for d in dependent]
    t_each = time.perf_counter() - t0
    assert shared == each
    print(f"{len(records):,} records, {len(dependent):,} dependent jobs:")
    print(
        f"  indexed once for the cycle: {t_shared:.3f} s ({1e3 * t_shared / len(dependent):.3f} ms per job)"
    )
    print(f"  indexed again for each job: {t_each:.3f} s ({1e3 * t_each / len(dependent):.3f} ms per job)")


if __name__ == "__main__":
    main()
