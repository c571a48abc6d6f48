"""What the strict-class limits add to a controller cycle: reading each user's urgent/prior use of the
last 7 days from the ledger (once a cycle, before decide), rendering the usage file and replacing it.

    python bench/bench_user_limits.py                  # 1,000 / 10,000 / 50,000 jobs in the week
    python bench/bench_user_limits.py --jobs 20000 --strict 0.3

The ledger (SQLite in a temporary directory): jobs of 200 users in 10 VCs over the last 7 days, a share
of them urgent or prior, each with its started/finished events as the controller writes them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy.orm import Session  # noqa: E402

from hivebatch.controller.usage import usage_lua, write_usage  # noqa: E402
from hivebatch.db import Base, Event, Job, make_engine  # noqa: E402
from hivebatch.reports.source import ledger_strict_usage  # noqa: E402


def fill(session: Session, jobs: int, strict: float, now: dt.datetime, rng: random.Random) -> None:
    for i in range(jobs):
        cls = rng.choice(("urgent", "prior")) if rng.random() < strict else "normal"
        start = now - dt.timedelta(hours=rng.uniform(0, 7 * 24))
        end = min(start + dt.timedelta(hours=rng.uniform(0.1, 24)), now)
        running = end >= now
        gpus = rng.choice((1, 1, 2, 4, 8))
        job = Job(
            slurm_job_id=100000 + i, user=f"user{rng.randrange(200)}", account=f"vc{rng.randrange(10)}",
            qos=cls, priority={"urgent": 2, "prior": 1, "normal": 0}[cls], foreign=False,
            request={"gpus": gpus}, gpus=gpus, state="running" if running else "done",
            submit_time=start, start_time=start, segment_start=start if running else None,
            end_time=None if running else end, created_at=start,
            gpu_hours_guaranteed=0.0 if running else gpus * (end - start).total_seconds() / 3600,
        )  # fmt: skip
        job.vc_name = job.account
        session.add(job)
        session.flush()
        session.add(
            Event(time=start, job_id=job.id, slurm_job_id=job.slurm_job_id, kind="started", message="")
        )
        if not running:
            session.add(
                Event(time=end, job_id=job.id, slurm_job_id=job.slurm_job_id, kind="finished", message="")
            )
    session.commit()


def measure(jobs: int, strict: float, repeat: int) -> None:
    rng = random.Random(7)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    with tempfile.TemporaryDirectory() as where:
        engine = make_engine(f"sqlite:///{where}/hb.db")
        Base.metadata.create_all(engine)
        with Session(engine) as session:
            fill(session, jobs, strict, now, rng)
            read, render = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                usage = ledger_strict_usage(session, now)
                t1 = time.perf_counter()
                write_usage(Path(where) / "hivebatch_usage.lua", usage_lua(usage, now))
                t2 = time.perf_counter()
                read.append(t1 - t0)
                render.append(t2 - t1)
            size = (Path(where) / "hivebatch_usage.lua").stat().st_size
        engine.dispose()
    best_read, best_render = min(read), min(render)
    print(
        f"{jobs:>7} jobs, {strict:.0%} strict: read {best_read * 1000:7.1f} ms, "
        f"file {best_render * 1000:5.1f} ms ({size / 1024:.0f} KiB, {len(usage)} user/VC/class rows); "
        f"per cycle {(best_read + best_render) * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, action="append", help="jobs in the week (repeatable)")
    parser.add_argument("--strict", type=float, default=0.2, help="share of urgent/prior jobs")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for jobs in args.jobs or [1000, 10000, 50000]:
        measure(jobs, args.strict, args.repeat)


if __name__ == "__main__":
    main()
