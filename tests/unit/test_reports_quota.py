"""The quota report on the scripted day of report_scenario.py, every figure worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_scenario import config_data, make_db, utc
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from hivebatch.reports.rows import JobRow, RunSegment
from hivebatch.reports.source import load_jobs
from hivebatch.reports.topology import vc_infos
from hivebatch.reports.usage import QuotaReport, quota_report


def _load(tmp_path: Path, with_events: bool = True) -> tuple[list[JobRow], list[RunSegment]]:
    engine = create_engine(make_db(tmp_path / "ledger.db", with_events=with_events))
    with Session(engine) as session:
        jobs, segments = load_jobs(session)
    engine.dispose()
    return jobs, segments


@pytest.fixture
def report(tmp_path: Path) -> QuotaReport:
    jobs, segments = _load(tmp_path)
    return quota_report(jobs, segments, vc_infos(config_data()), utc(0), utc(10), total_gpus=32)


def test_gpu_hours_and_reservation_share(report: QuotaReport) -> None:
    vcs = {v.name: v for v in report.vcs}
    assert [v.name for v in report.vcs] == ["cv", "nlp", "sys"]
    # cv: 8 GPUs × 4 h + 4 × 2 h + 2 × 1 h = 42 GPU-h of 12 GPUs × 10 h
    assert vcs["cv"].gpus_reserved == 12
    assert vcs["cv"].gpu_hours_guaranteed == pytest.approx(42.0)
    assert vcs["cv"].reservation_share == pytest.approx(42 / 120)
    # nlp: 16 × 8 h + 8 × 1.5 h (j106 running since 8.5) = 140; j110 opportunistic 2 × 1 h
    assert vcs["nlp"].gpu_hours_guaranteed == pytest.approx(140.0)
    assert vcs["nlp"].gpu_hours_opportunistic == pytest.approx(2.0)
    assert vcs["nlp"].reservation_share == pytest.approx(140 / 160)
    # sys: j107 1 × 1 h guaranteed; j108 4 × (2 + 3) h and j109 2 × 3 × 1 h opportunistic
    assert vcs["sys"].gpu_hours_guaranteed == pytest.approx(1.0)
    assert vcs["sys"].gpu_hours_opportunistic == pytest.approx(26.0)
    assert vcs["sys"].cells == {"V100-SWITCH": 1, "V100": 2}


def test_jobs_waits_and_private_estimate(report: QuotaReport) -> None:
    vcs = {v.name: v for v in report.vcs}
    assert (vcs["cv"].jobs_run, vcs["cv"].jobs_pending) == (3, 0)
    assert (vcs["nlp"].jobs_run, vcs["nlp"].jobs_pending) == (3, 1)
    assert (vcs["sys"].jobs_run, vcs["sys"].jobs_pending) == (3, 1)  # j109 waits again after preemption
    # cv waits 0.5 h, 0 h, 0.25 h: mean 15 min, nearest-rank p95 = the largest of three = 30 min
    assert vcs["cv"].mean_queue_s == pytest.approx(900)
    assert vcs["cv"].p95_queue_s == pytest.approx(1800)
    # privately (12 GPUs) j101 (8) and j102 (4) fit side by side, j103 comes after j101 ends: no wait
    assert vcs["cv"].private_queue_s == pytest.approx(0)
    assert vcs["cv"].excess_queue_s == pytest.approx(900)
    # sys: j107 waited 1 h (its GPU was lent to j108 until the preemption), privately 0
    assert vcs["sys"].mean_queue_s == pytest.approx(1200)  # (1 h + 0 + 0) / 3
    assert vcs["sys"].excess_queue_s == pytest.approx(3600)
    # nlp's pending j105 has waited since hour 2
    assert vcs["nlp"].oldest_pending_s == pytest.approx(8 * 3600)


def test_qos_rates_and_missed_deadlines(report: QuotaReport) -> None:
    vcs = {v.name: v for v in report.vcs}
    assert (vcs["cv"].qos["urgent"].met, vcs["cv"].qos["urgent"].total) == (1, 1)
    assert (vcs["cv"].qos["prior"].met, vcs["cv"].qos["prior"].total) == (0, 1)  # j102 ended 3.0 > ECT 2.5
    assert (vcs["nlp"].qos["normal"].met, vcs["nlp"].qos["normal"].total) == (
        1,
        2,
    )  # j105 still waits past ECT
    assert vcs["nlp"].qos["prior"].total == 0  # j106 runs, its ECT (12) is after the window
    assert [j.job_id for j in report.missed_jobs] == ["102", "105"]
    # waiting now: guaranteed work first, then opportunistic; each with the controller's reason
    assert [j.job_id for j in report.waiting_jobs] == ["105", "109"]
    assert "node2 is bad" in (report.waiting_jobs[0].reason or "")
    t = report.totals
    assert (t.qos["normal"].met, t.qos["normal"].total) == (3, 4)
    assert (t.qos_overall.met, t.qos_overall.total) == (4, 6)
    assert t.missed_ect == 2


def test_totals_lending_and_preemption(report: QuotaReport) -> None:
    t = report.totals
    assert t.gpus == 32
    assert t.gpu_hours_capacity == pytest.approx(320)
    assert t.gpu_hours_guaranteed == pytest.approx(183)
    assert t.gpu_hours_opportunistic == pytest.approx(28)
    assert t.utilization == pytest.approx(211 / 320)
    assert (t.jobs_run, t.jobs_pending) == (9, 2)
    assert t.gpus_lent_now == 2  # j110 still runs on borrowed GPUs
    # j108 lost 4 × 2 h, j109 three runs of 2 × 1 h
    assert t.preemptions == 4
    assert t.preempted_gpu_hours == pytest.approx(14)


def test_verdicts_name_the_full_and_the_starved(report: QuotaReport) -> None:
    verdicts = {v.name: v.verdict for v in report.vcs}
    # nlp uses 88% of its reservation: its backlog asks for more cells, it is not starved by others.
    # sys barely uses its cells, yet its one guaranteed job waited an hour for a GPU lent to
    # opportunistic work: that is starvation, even though the VC is nearly idle.
    assert verdicts == {"cv": "ok", "nlp": "full", "sys": "starved"}
    vcs = {v.name: v for v in report.vcs}
    assert vcs["nlp"].verdict_detail == "88% of its reservation used, 1 pending, oldest waits 8.0h"
    assert vcs["sys"].verdict_detail == "2% of its reservation used, waits +1.0h longer than on its own cells"


@pytest.mark.parametrize(
    ("share", "pending", "oldest_h", "excess_h", "verdict"),
    [
        (0.40, 2, 3.0, 0.0, "starved"),  # waits hours while most of its cells are unused
        (0.90, 2, 3.0, 0.0, "full"),
        (0.90, 0, None, 1.0, "starved"),  # waited an hour longer than on its own cells
        (0.10, 0, None, 0.0, "idle"),
        (0.10, 1, 0.5, 0.0, "ok"),  # a short wait is no starvation, and it is not idle either
        (0.50, 0, None, 0.25, "ok"),
    ],
)
def test_verdict_rules(
    share: float, pending: int, oldest_h: float | None, excess_h: float, verdict: str
) -> None:
    from hivebatch.reports.usage import VCReport, _verdict

    vc = VCReport(
        name="x",
        cells={},
        gpus_reserved=8,
        reservation_share=share,
        guaranteed_pending=pending,
        oldest_pending_s=oldest_h * 3600 if oldest_h is not None else None,
        excess_queue_s=excess_h * 3600,
    )
    assert _verdict(vc)[0] == verdict


def test_window_clips_usage(tmp_path: Path) -> None:
    jobs, segments = _load(tmp_path)
    rep = quota_report(jobs, segments, vc_infos(config_data()), utc(4), utc(6), total_gpus=32)
    cv = next(v for v in rep.vcs if v.name == "cv")
    # 4–6 h: j101 runs 4–4.5 (8 × 0.5 = 4), j103 runs 5.25–6 (2 × 0.75 = 1.5)
    assert cv.gpu_hours_guaranteed == pytest.approx(5.5)
    # only j103 started inside the window
    assert cv.mean_queue_s == pytest.approx(900)
    # j101 finished at 4.5 within its ECT; j102 ended before the window and j103 after it (6.25)
    assert (cv.qos_overall.met, cv.qos_overall.total) == (1, 1)


def test_vc_filter_keeps_only_that_vc(tmp_path: Path) -> None:
    jobs, segments = _load(tmp_path)
    rep = quota_report(jobs, segments, vc_infos(config_data()), utc(0), utc(10), total_gpus=32, only_vc="sys")
    assert [v.name for v in rep.vcs] == ["sys"]
    assert rep.totals.gpu_hours_opportunistic == pytest.approx(26)
    assert rep.missed_jobs == []


def test_ledger_without_events_gives_the_same_gpu_hours(tmp_path: Path) -> None:
    """Segments rebuilt from the job's own times and booked GPU-hours when the audit trail is missing."""
    jobs, segments = _load(tmp_path, with_events=False)
    rep = quota_report(jobs, segments, vc_infos(config_data()), utc(0), utc(10), total_gpus=32)
    t = rep.totals
    assert t.gpu_hours_guaranteed == pytest.approx(183)
    assert t.gpu_hours_opportunistic == pytest.approx(28)
    assert t.preempted_gpu_hours == pytest.approx(14)


def test_vc_now_comes_from_the_allocator_snapshot(tmp_path: Path) -> None:
    """node2 is drained: nlp (two node cells) can back only one of them, sys loses the GPU busy on node4."""
    from hivebatch.reports.load import load_vc_now

    engine = create_engine(make_db(tmp_path / "ledger.db"))
    with Session(engine) as session:
        now = load_vc_now(session, config_data())
        jobs, segments = load_jobs(session)
    engine.dispose()
    assert (now["nlp"].gpus_total, now["nlp"].gpus_used, now["nlp"].capacity) == (16, 8, 8)
    assert "node2" in (now["nlp"].reason or "")
    assert (now["cv"].capacity, now["cv"].reason) == (12, None)
    rep = quota_report(jobs, segments, vc_infos(config_data()), utc(0), utc(10), total_gpus=32, now=now)
    texts = {v.name: v.now_text for v in rep.vcs}
    assert texts == {"cv": "0/12", "nlp": "8/8 of 16", "sys": "0/3 of 4"}


def test_a_job_whose_ect_is_its_submission_is_met_when_it_started_at_once() -> None:
    from hivebatch.reports.usage import qos_outcome

    t0, since, until = utc(1), utc(0), utc(10)

    def asap(start_min: float | None, state: str = "done") -> JobRow:
        start = None if start_min is None else utc(1 + start_min / 60)
        return JobRow(job_id="u", user="alice", vc="cv", qos="urgent", gpus=1, state=state, submit_time=t0,
                      start_time=start, end_time=utc(3) if state == "done" else None, ect=t0)  # fmt: skip

    assert qos_outcome(asap(1), since, until) is True  # started a minute after submission
    assert qos_outcome(asap(5), since, until) is False  # waited 5 minutes
    assert qos_outcome(asap(None, "queued"), since, until) is False  # still waiting, long past the grace
    assert qos_outcome(asap(None, "queued"), since, utc(1 + 1 / 60)) is None  # too early to say
    # a class with a real deadline still counts by its end time
    normal = JobRow(job_id="n", user="alice", vc="cv", qos="normal", gpus=1, state="done", submit_time=t0,
                    start_time=utc(2), end_time=utc(3), ect=utc(4))  # fmt: skip
    assert qos_outcome(normal, since, until) is True
