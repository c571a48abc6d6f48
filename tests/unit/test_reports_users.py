"""Per-user report and waste flags on the scripted day (report_scenario.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from report_scenario import make_db, utc
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from hivebatch.reports.rows import JobRow, RunSegment
from hivebatch.reports.source import load_jobs
from hivebatch.reports.users import UserReport, users_report


@pytest.fixture
def users(tmp_path: Path) -> dict[str, UserReport]:
    engine = create_engine(make_db(tmp_path / "ledger.db"))
    with Session(engine) as session:
        jobs, segments = load_jobs(session)
    engine.dispose()
    rows = users_report(jobs, segments, utc(0), utc(10), {"V100": 8})
    assert [u.user for u in rows] == ["bob", "alice", "carol"]  # by GPU-hours, largest first
    return {u.user: u for u in rows}


def test_gpu_hours_jobs_and_deadlines(users: dict[str, UserReport]) -> None:
    bob, alice, carol = users["bob"], users["alice"], users["carol"]
    assert bob.gpu_hours == pytest.approx(142) and bob.gpu_hours_opportunistic == pytest.approx(2)
    assert (bob.jobs_run, bob.jobs_pending) == (3, 1)
    assert (bob.qos.met, bob.qos.total, bob.missed_ect) == (1, 2, 1)
    assert alice.gpu_hours == pytest.approx(42)
    assert alice.mean_queue_s == pytest.approx(900)
    assert (alice.qos.met, alice.qos.total) == (2, 3)
    assert carol.gpu_hours_guaranteed == pytest.approx(1) and carol.gpu_hours_opportunistic == pytest.approx(
        26
    )
    assert carol.vcs == ["sys"]


def test_waste_flags(users: dict[str, UserReport]) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    # alice ran 4/8, 2/10 and 1/10 of her limits: median 0.2 < 0.25
    assert alice.median_limit_use == pytest.approx(0.2)
    assert any("time limits too long" in f and "20%" in f for f in alice.flags)
    # j103: 2 GPUs on two nodes, though a node has 8
    assert alice.multinode_fit_one == 1
    assert any("would fit on one node" in f for f in alice.flags)
    # carol: j108 once, j109 three times; 8 + 6 GPU-h lost
    assert carol.preemptions == 4 and carol.preempted_gpu_hours == pytest.approx(14)
    assert any("preempted 4×" in f and "14.0 GPU-h" in f for f in carol.flags)
    # carol's runs used 1/1 and 5/8 of their limits: median 0.8125, no flag
    assert carol.median_limit_use == pytest.approx(0.8125)
    assert not any("time limits" in f for f in carol.flags)
    # bob: one finished job with a limit (8 of 12 h) is not enough to judge, his 16-GPU job needs 2 nodes
    assert bob.flags == []


def _job(
    job_id: str,
    gpus: int,
    nodes: dict[str, list[int]],
    limit_h: float,
    run_h: float,
    asked: int | None = None,
) -> tuple[JobRow, RunSegment]:
    t0 = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
    end = t0 + dt.timedelta(hours=run_h)
    row = JobRow(job_id, "dave", "cv", "normal", gpus, "done", t0, t0, end, nodes=len(nodes),
                 requested_nodes=asked, time_limit_s=limit_h * 3600, placement=nodes, gpu_type="V100")  # fmt: skip
    return row, RunSegment(job_id, "dave", "cv", gpus, t0, end)


def test_flags_need_evidence() -> None:
    """One short job is no habit; 8 GPUs over 2 nodes of 4 is not a one-node job on a 4-GPU node type."""
    j1, s1 = _job("1", 8, {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]}, limit_h=10, run_h=1, asked=2)
    t0 = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
    rows = users_report([j1], [s1], t0, t0 + dt.timedelta(days=1), {"V100": 4})
    assert rows[0].flags == []
    j2, s2 = _job("2", 2, {"a": [0, 1]}, limit_h=10, run_h=2)
    rows = users_report([j1, j2], [s1, s2], t0, t0 + dt.timedelta(days=1), {"V100": 4})
    assert rows[0].median_limit_use == pytest.approx(0.15)
    assert len(rows[0].flags) == 1 and "time limits too long" in rows[0].flags[0]


def test_a_multi_node_shape_hivebatch_chose_is_not_flagged() -> None:
    t0 = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
    day = t0 + dt.timedelta(days=1)
    chosen, s1 = _job("1", 4, {"a": [0, 1], "b": [0, 1]}, limit_h=1, run_h=1)
    assert users_report([chosen], [s1], t0, day, {"V100": 8})[0].flags == []
    asked, s2 = _job("2", 4, {"a": [0, 1], "b": [0, 1]}, limit_h=1, run_h=1, asked=2)
    flags = users_report([asked], [s2], t0, day, {"V100": 8})[0].flags
    assert flags == ["1 multi-node job would fit on one node (use -N 1)"]
