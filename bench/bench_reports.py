"""How long hadmin's reports take on a large ledger.

Builds a synthetic SQLite ledger (default 50,000 jobs over 7 days on 256 nodes × 8 GPUs, ~3 events per
job, a GPU map of 2,048 GPUs) through the real models, then times each stage of `hadmin report`:
loading the rows, the quota and user reports, the HTML page with its plots, and the cluster map.

    .venv/bin/python bench/bench_reports.py [--jobs N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from hivebatch.db.models import Base, Event, GpuBinding, Job
from hivebatch.reports.gpumap import NodeLayout, build_cluster_map
from hivebatch.reports.html import ReportInputs, render_html
from hivebatch.reports.rows import VCInfo
from hivebatch.reports.source import load_jobs, load_slots
from hivebatch.reports.usage import quota_report
from hivebatch.reports.users import users_report

NODES = 256
GPN = 8
VCS = {f"vc{i:02d}": 16 * 8 for i in range(16)}  # 16 VCs of 16 nodes each
LEVELS = [("V100", 1), ("V100-SWITCH", 2), ("V100-SOCKET", 4), ("V100-NODE", 8)]


def build(path: Path, jobs: int, seed: int = 1) -> tuple[dt.datetime, dt.datetime]:
    rng = random.Random(seed)
    t0 = dt.datetime(2026, 11, 9)
    until = t0 + dt.timedelta(days=7)
    engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    job_rows, event_rows = [], []
    for i in range(jobs):
        vc = rng.choice(list(VCS))
        gpus = rng.choice([1, 1, 2, 4, 8, 16])
        submit = t0 + dt.timedelta(seconds=rng.uniform(0, 7 * 86400 - 3600))
        wait = rng.expovariate(1 / 1800)
        run = rng.uniform(600, 6 * 3600)
        start = submit + dt.timedelta(seconds=wait)
        end = start + dt.timedelta(seconds=run)
        qos = rng.choices(["urgent", "prior", "normal", "opportunistic"], [5, 30, 55, 10])[0]
        done = end < until
        state = "done" if done else ("running" if start < until else "queued")
        hours = gpus * run / 3600 if done else 0.0
        job_rows.append(
            {
                "id": i + 1,
                "slurm_job_id": 1000 + i,
                "user": f"u{rng.randrange(200)}",
                "vc_name": vc,
                "account": vc,
                "qos": qos,
                "priority": -1 if qos == "opportunistic" else 0,
                "foreign": False,
                "request": {"vc": vc, "gpus": gpus, "time_limit_s": int(run * rng.uniform(1, 6))},
                "gpus": gpus,
                "gpu_type": "V100",
                "state": state,
                "placement": {f"n{rng.randrange(NODES)}": list(range(min(gpus, GPN)))},
                "expected_completion": submit + dt.timedelta(seconds=run * rng.uniform(1, 3)),
                "submit_time": submit,
                "start_time": start if start < until else None,
                "segment_start": start if state == "running" else None,
                "end_time": end if done else None,
                "preemptions": 0,
                "gpu_hours_guaranteed": 0.0 if qos == "opportunistic" else hours,
                "gpu_hours_opportunistic": hours if qos == "opportunistic" else 0.0,
                "gpu_hours_lost": 0.0,
                "created_at": submit,
                "updated_at": submit,
            }
        )
        event_rows.append(
            {"time": submit, "job_id": i + 1, "slurm_job_id": 1000 + i, "kind": "submitted", "message": "-"}
        )
        if start < until:
            event_rows.append(
                {"time": start, "job_id": i + 1, "slurm_job_id": 1000 + i, "kind": "started", "message": "-"}
            )
        if done:
            event_rows.append(
                {"time": end, "job_id": i + 1, "slurm_job_id": 1000 + i, "kind": "finished", "message": "-"}
            )
    slots = [
        {"node": f"n{n}", "gpu_index": g, "gpu_type": "V100", "kind": rng.choice(["free", "guaranteed"]),
         "vc_name": None, "slurm_job_id": None, "bad": False, "updated_at": until}
        for n in range(NODES) for g in range(GPN)
    ]  # fmt: skip
    with Session(engine) as session:
        session.execute(insert(Job), job_rows)
        session.execute(insert(Event), event_rows)
        session.execute(insert(GpuBinding), slots)
        session.commit()
    engine.dispose()
    return t0, until


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        t = time.perf_counter()
        since, until = build(path, args.jobs)
        print(
            f"synthetic ledger: {args.jobs} jobs, {NODES}×{GPN} GPUs, built in {time.perf_counter() - t:.1f} s"
        )
        from hivebatch.reports.timeutil import as_utc

        since_u, until_u = as_utc(since), as_utc(until)
        assert since_u is not None and until_u is not None
        engine = create_engine(f"sqlite:///{path}")
        timings: list[tuple[str, float]] = []
        t = time.perf_counter()
        with Session(engine) as session:
            jobs, segments = load_jobs(session, since_u)
            slots, _taken = load_slots(session)
        timings.append(("load rows from the ledger", time.perf_counter() - t))
        vcs = [VCInfo(name, {"V100-NODE": gpus // GPN}, gpus) for name, gpus in VCS.items()]
        t = time.perf_counter()
        quota = quota_report(jobs, segments, vcs, since_u, until_u, NODES * GPN)
        timings.append(("quota report", time.perf_counter() - t))
        t = time.perf_counter()
        users = users_report(jobs, segments, since_u, until_u, {"V100": GPN})
        timings.append(("users report", time.perf_counter() - t))
        t = time.perf_counter()
        layouts = [NodeLayout(f"n{n}", "V100", list(range(GPN)), LEVELS) for n in range(NODES)]
        cmap = build_cluster_map(layouts, slots)
        cmap.fragmentation()
        timings.append(("cluster map + fragmentation", time.perf_counter() - t))
        t = time.perf_counter()
        page = render_html(ReportInputs(quota, users, jobs, segments, cmap))
        timings.append(("HTML page with 3 plots", time.perf_counter() - t))
        engine.dispose()
        for name, seconds in timings:
            print(f"{name:32s} {seconds:7.2f} s")
        print(
            f"{'total':32s} {sum(s for _n, s in timings):7.2f} s   (HTML {len(page) // 1024} KiB, {len(segments)} run segments)"
        )


if __name__ == "__main__":
    main()
