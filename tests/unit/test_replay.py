"""hivebatch replay's pure parts: slice selection, time compression, and figures from recorded sacct rows."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from recorded_sacct import RECORDED_FIELDS

from hivebatch.cli.common import run_cli
from hivebatch.cli.hivebatch.main import cli
from hivebatch.errors import HivebatchError
from hivebatch.replay import compare, live
from hivebatch.replay.measure import job_error, job_name, measured_records, measured_summary
from hivebatch.replay.plan import Plan, SliceSpec, plan_replay, select_slice
from hivebatch.sim.workload import SimJob
from hivebatch.slurm.parse import parse_sacct, requeue_delay_s

PROJECT = Path(__file__).resolve().parents[2]
FIXTURES = PROJECT / "tests" / "fixtures"
LAB_VCS = {"cv": 12, "nlp": 16, "sys": 4}


def _job(jid: str, arrival: float, gpus: int = 1, duration: float = 600.0, vc: str = "cv") -> SimJob:
    return SimJob(job_id=jid, vc=vc, cls="normal", arrival=arrival, gpus=gpus, duration_s=duration)


def test_slice_takes_the_window_rebased_and_the_first_n() -> None:
    jobs = [_job(f"j{i}", 100.0 * i) for i in range(10)]
    got = select_slice(jobs, SliceSpec(start_s=250, length_s=400))
    assert [j.job_id for j in got] == ["j3", "j4", "j5", "j6"]
    assert [j.arrival for j in got] == [0.0, 100.0, 200.0, 300.0]
    assert jobs[3].arrival == 300.0  # the trace's jobs are not changed
    assert [j.job_id for j in select_slice(jobs, SliceSpec(start_s=250, length_s=400, max_jobs=2))] == [
        "j3",
        "j4",
    ]
    assert select_slice(jobs, SliceSpec(start_s=5000, length_s=10)) == []


def test_time_is_compressed_and_run_times_clamped() -> None:
    jobs = [
        _job("short", 0.0, duration=10.0),  # below 3 s real at speedup 10: raised to 3 s
        _job("mid", 80.0, gpus=4, duration=205.37),  # 20.537 s real: to a tenth
        _job("long", 160.0, gpus=12, duration=10_000.0),  # cut to 60 s real; 12 GPUs = 2 nodes x 6
    ]
    plan = plan_replay(jobs, SliceSpec(length_s=1000, speedup=10), LAB_VCS, gpus_per_node=8, max_nodes=4)
    by = {p.job.job_id: p for p in plan.jobs}
    assert [by[j].at_s for j in ("short", "mid", "long")] == [0.0, 8.0, 16.0]
    assert by["short"].sleep_s == 3 and by["short"].job.duration_s == 30.0
    assert by["mid"].sleep_s == 20.5 and by["mid"].job.duration_s == 205.0  # the simulator replays the same
    assert by["long"].sleep_s == 60 and (by["long"].nodes, by["long"].gpus_per_node) == (2, 6)
    assert by["long"].time_limit_min == 2
    # the simulator's scheduler sees the limit the controller sees (2 real minutes), not the run time
    assert by["long"].job.time_limit_s == 2 * 60 * 10 and by["short"].job.time_limit_s == 2 * 60 * 10
    assert plan.clamped == 2 and plan.mapped == 0 and plan.dropped == 0
    assert plan.wall_s == 76.0


def test_foreign_vcs_are_mapped_by_hash_and_jobs_too_large_dropped() -> None:
    jobs = [_job(f"x{i}", float(i), gpus=8, vc="philly-vc") for i in range(30)]
    plan = plan_replay(jobs, SliceSpec(length_s=100), LAB_VCS, gpus_per_node=8, max_nodes=4)
    assert plan.mapped == 30
    assert {p.job.vc for p in plan.jobs} <= {"cv", "nlp"}  # sys has 4 GPUs: its 8-GPU jobs go
    assert plan.dropped == 30 - len(plan.jobs) > 0
    again = plan_replay(jobs, SliceSpec(length_s=100), LAB_VCS, gpus_per_node=8, max_nodes=4)
    assert [p.job.vc for p in again.jobs] == [p.job.vc for p in plan.jobs]


def test_a_vc_alone_keeps_its_jobs_at_the_times_they_have_in_the_whole_slice() -> None:
    jobs = [_job("late-cv", 50.0), _job("first-nlp", 20.0, vc="nlp"), _job("cv2", 90.0, gpus=4)]
    whole = plan_replay(jobs, SliceSpec(length_s=1000, speedup=10), LAB_VCS, gpus_per_node=8, max_nodes=4)
    cv = whole.only_vc("cv")
    assert [p.job.job_id for p in cv.jobs] == ["late-cv", "cv2"]
    # the slice starts at nlp's job, as in the whole replay: cv's jobs arrive when they arrive there
    assert [p.at_s for p in cv.jobs] == [3.0, 7.0] == [p.at_s for p in whole.jobs if p.job.vc == "cv"]
    assert cv.summary().startswith("VC cv alone: 2 jobs over ") and whole.alone is None
    assert whole.only_vc("sys").jobs == []


def test_bad_slice_is_refused_in_one_line() -> None:
    with pytest.raises(HivebatchError, match="speedup"):
        select_slice([], SliceSpec(speedup=0))
    with pytest.raises(HivebatchError, match="min-run"):
        select_slice([], SliceSpec(min_run_s=10, max_run_s=5))


def _tiny() -> tuple[Plan, dict[str, Any]]:
    doc = json.loads((FIXTURES / "replay" / "philly_tiny_slice.json").read_text())
    jobs = [SimJob(**j) for j in doc["jobs"]]
    plan = plan_replay(jobs, SliceSpec(**doc["slice"]), LAB_VCS, gpus_per_node=8, max_nodes=4)
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    return plan, data


@pytest.mark.parametrize("mode", ["plain", "hivebatch"])
def test_figures_from_recorded_sacct_rows(mode: str) -> None:
    plan, data = _tiny()
    rows = parse_sacct((FIXTURES / "slurm" / "sacct_replay_tiny.txt").read_text(), RECORDED_FIELDS)
    pred = compare.predict(plan, data, PROJECT / "etc", mode, "tetris-perf" if mode == "plain" else "qos")
    real = measured_summary(pred.run, rows, plan, mode, pred.private)
    assert real.completed == real.jobs == 8
    # the waits, straight from the recorded rows, in trace seconds (speedup 60)
    mine = {r.name: r for r in rows if r.name.startswith(f"hbreplay-{mode}-")}
    assert len(mine) == 8
    vc_of = {job_name(mode, p.job.job_id): p.job.vc for p in plan.jobs}
    waits: dict[str, list[float]] = {}
    for name, r in mine.items():
        assert r.start_time is not None and r.submit_time is not None
        waits.setdefault(vc_of[name], []).append((r.start_time - r.submit_time).total_seconds() * 60)
    for vc, ws in waits.items():
        entry = real.vcs[vc]
        assert entry["jobs"] == len(ws)
        assert entry["avg_queue_s"] == pytest.approx(sum(ws) / len(ws), abs=1e-3)
        assert entry["excess_queue_s"] == pytest.approx(entry["avg_queue_s"] - pred.private[vc], abs=1e-3)
    assert real.avg_queue_s == pytest.approx(sum(sum(w) for w in waits.values()) / 8)
    err = job_error(pred.run.records, measured_records(pred.run, rows, plan, mode))
    assert err is not None and err.jobs == 8
    predicted = {r.job.job_id: r.queue_s for r in pred.run.records}
    by_job = [abs(predicted[n.removeprefix(f"hbreplay-{mode}-")] - (r.start_time - r.submit_time).total_seconds() * 60)
              for n, r in mine.items() if r.start_time is not None and r.submit_time is not None]  # fmt: skip
    assert err.mean_abs_s == pytest.approx(sum(by_job) / 8, abs=1e-3)
    report = compare.comparison({mode: (real, pred.summary)}, interval_trace_s=120.0, job_errors={mode: err})
    assert set(report["vcs"]) == set(waits)
    assert report["modes"][mode]["job_error"]["jobs"] == 8
    table = compare.format_table(report)
    assert all(vc in table for vc in waits) and "sim error on mean wait" in table
    assert f"sim error per job\t{err.mean_abs_s / 60:.2f} min mean absolute" in table


def test_the_error_job_by_job_sees_what_cancels_in_the_mean() -> None:
    plan, data = _tiny()
    rows = parse_sacct((FIXTURES / "slurm" / "sacct_replay_tiny.txt").read_text(), RECORDED_FIELDS)
    pred = compare.predict(plan, data, PROJECT / "etc", "hivebatch", "qos")
    measured = measured_records(pred.run, rows, plan, "hivebatch")
    same = job_error(measured, measured)
    assert same is not None and same.mean_abs_s == 0 and same.jobs == 8
    # two jobs' waits swapped: the mean wait is the same, each job is off by the difference
    a, b = [r for r in measured if r.end is not None][:2]
    shift = b.queue_s - a.queue_s
    assert shift != 0
    swapped = [
        replace(r, end=r.end + shift) if r is a else replace(r, end=r.end - shift) if r is b else r
        for r in measured
    ]
    assert sum(r.queue_s for r in swapped) == pytest.approx(sum(r.queue_s for r in measured))
    err = job_error(swapped, measured)
    assert err is not None and err.mean_abs_s == pytest.approx(2 * abs(shift) / err.jobs)
    assert job_error(swapped, []) is None


def test_a_job_slurm_did_not_complete_is_not_counted() -> None:
    plan, data = _tiny()
    rows = [
        r
        for r in parse_sacct((FIXTURES / "slurm" / "sacct_replay_tiny.txt").read_text(), RECORDED_FIELDS)
        if r.job_id != 12
    ]
    pred = compare.predict(plan, data, PROJECT / "etc", "hivebatch", "qos")
    real = measured_summary(pred.run, rows, plan, "hivebatch", pred.private)
    assert (real.completed, real.jobs) == (7, 8)


def test_a_preempted_job_waits_from_its_first_submission_and_counts_its_lost_run() -> None:
    # one recorded job run twice, as the lab's sacct --duplicates shows a requeue
    # (tests/fixtures/slurm/sacct_requeued_runs.txt): the later run is submitted at the requeue
    from datetime import timedelta

    plan, data = _tiny()
    rows = parse_sacct((FIXTURES / "slurm" / "sacct_replay_tiny.txt").read_text(), RECORDED_FIELDS)
    mine = [r for r in rows if r.name.startswith("hbreplay-plain-")]
    job = mine[1]  # 4 GPUs of cv, waited 1 s, ran 3 s
    assert job.submit_time is not None and job.start_time is not None and job.end_time is not None
    s = timedelta(seconds=1)
    cut = replace(job, state="REQUEUED", end_time=job.start_time + 2 * s, elapsed_s=2)
    again = replace(
        job, submit_time=cut.end_time, start_time=cut.end_time + 12 * s, end_time=cut.end_time + 15 * s
    )
    others = [r for r in mine if r is not job]
    pred = compare.predict(plan, data, PROJECT / "etc", "plain", "tetris-perf")
    by_name = {r.job.job_id: r for r in measured_records(pred.run, [*others, cut, again], plan, "plain")}
    once = {r.job.job_id: r for r in measured_records(pred.run, mine, plan, "plain")}
    jid = job.name.removeprefix("hbreplay-plain-")
    twice = by_name[jid]
    assert twice.preemptions == 1 and once[jid].preemptions == 0
    # waited 1 s, ran 2 s, was requeued and waited 12 s more: 15 real s = 900 trace s at speedup 60
    assert twice.queue_s == pytest.approx(15 * 60) and once[jid].queue_s == pytest.approx(1 * 60)
    assert twice.first_start == pytest.approx(twice.job.arrival + 60)
    assert twice.lost_gpu_s == pytest.approx(2 * 60 * 4) and twice.run_s == pytest.approx(3 * 60)
    real = measured_summary(pred.run, [*others, cut, again], plan, "plain", pred.private)
    assert real.completed == 8 and real.preemptions == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "cv"], "VC=USER"),
        (["--speedup", "0"], "--speedup must be > 0"),
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--start", "100"], "no jobs in the slice"),
        (["--keep", "kept"], "only a hivebatch run has a ledger to keep, not --mode sim"),
        (["--mode", "hivebatch", "--keep", "/nonexistent/kept"], "is not in an existing directory"),
        (["--mode", "hivebatch", "--keep", "/"], "/ exists: give a new directory"),
        (["--start-latency", "-1"], "-1.0 is not in the range x>=0"),
        (["--alone", "vision"], "'vision' is not a VC of the config: use one of cv, nlp, sys"),
        (["--alone", "sys"], "no jobs of VC sys in the slice"),
        (["--alone", "cv", "--mode", "both"], "only through hivebatch, not --mode both"),
    ],
)
def test_bad_input_is_one_clear_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-03 10:00:00,60,1,60,cv\n")
    base = ["replay", "--trace", str(trace), "--trace-format", "philly", "--mode", "sim"]
    code = 0
    try:
        run_cli(cli, [*base, "--config", str(PROJECT / "etc" / "hivebatch.example.yaml"), *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert message in err and "Traceback" not in err


def test_the_wait_is_split_between_the_controller_and_slurm_per_vc() -> None:
    import datetime as dt

    from hivebatch.replay.latency import JobTimes, latency_lines

    t0 = dt.datetime(2026, 11, 24, 12, 0, 0)
    s = dt.timedelta(seconds=1)
    jobs = [
        JobTimes("nlp", t0, t0 + 4 * s, t0 + 5 * s, ("waits for 8 GPUs", "reserved: starts by 12:00:04")),
        JobTimes("nlp", t0, t0 + 2 * s, t0 + 5 * s, ("waits for 4 GPUs",)),
        JobTimes("cv", t0, t0 + 1 * s, t0 + 2 * s),
        JobTimes("cv", t0, None, None),  # never placed: counted, not timed
    ]
    assert latency_lines(jobs, [0.2, 0.4, 1.0]) == [
        "controller: 3 cycles, median 0.40 s, longest 1.00 s",
        "cv: submit -> placed mean 1.0, max 1.0 s; placed -> started mean 1.0, max 1.0 s (real seconds, 2 jobs)",
        "nlp: submit -> placed mean 3.0, max 4.0 s; placed -> started mean 2.0, max 3.0 s (real seconds, 2 jobs)",
        "nlp: the longest wait was told: waits for 8 GPUs | reserved: starts by 12:00:04",
    ]
    # given when each cycle began, the period the prediction assumed is checked too
    first = latency_lines(jobs, [0.2, 0.4, 1.0], [50.0, 52.0, 54.3])[0]
    assert first == "controller: 3 cycles, one every 2.150 s, median 0.40 s, longest 1.00 s"


def test_hivebatch_is_predicted_with_the_controllers_reservations_and_fairshare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []
    real = compare.Simulation

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "Simulation", recording)
    jobs = [_job("a", 0.0, gpus=8, duration=300.0), _job("b", 10.0, gpus=4, duration=200.0)]
    plan = plan_replay(jobs, SliceSpec(length_s=1000, speedup=10), LAB_VCS, gpus_per_node=8, max_nodes=4)
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    data["controller"] = {**data.get("controller", {}), "starve_after_h": 2, "fairshare_half_life_h": 24}
    compare.predict(plan, data, None, "hivebatch", "qos")
    assert (seen[-1]["backfill"], seen[-1]["starve_after_s"], seen[-1]["fairshare_half_life_s"]) == (
        True,
        7200.0,
        86400.0,
    )
    assert seen[-1]["notice"].notice_s == 120.0  # victims told to leave, as the controller tells them
    data["controller"]["backfill"] = False
    compare.predict(plan, data, None, "hivebatch", "qos")
    assert seen[-1]["backfill"] is False


def _alone(*more: SimJob) -> tuple[Plan, dict[str, Any]]:
    """Three 16-GPU jobs (and ``more``) of cv, the one VC, which owns every cell of the lab's cluster."""
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    data["virtual_clusters"] = {"cv": {"cells": {"V100-NODE": 4}}}
    jobs = [_job(f"n{i}", 10.0 * i, gpus=16, duration=600.0) for i in range(3)] + list(more)
    return plan_replay(jobs, SliceSpec(length_s=1000, speedup=1, max_run_s=1000), {"cv": 32}, 8, 4), data


def test_a_vc_alone_on_the_cluster_waits_exactly_as_on_its_private_cluster() -> None:
    # One VC owns every cell: hivebatch's run is its private cluster, so whatever the scheduler does
    # (class ranking, notices, cycles) is in both and the excess is 0. A baseline run by another
    # scheduler (arrival order, at every event) would charge the VC the scheduler's own choices.
    plan, data = _alone(replace(_job("p", 35.0, gpus=16, duration=100.0), cls="prior"))
    pred = compare.predict(plan, data, None, "hivebatch", "qos", cycle_s=64.0)
    waits = {r.job.job_id: r.queue_s for r in pred.run.records}
    assert waits["p"] < waits["n2"]  # the prior job went first, at a cycle
    assert pred.summary.vcs["cv"]["excess_queue_s"] == pytest.approx(0.0, abs=1e-6)


def test_hivebatch_is_predicted_with_slurms_start_latency_in_both_runs() -> None:
    # the same VC alone: each job starts the latency after its cycle, in the shared run and in the
    # private baseline alike, so the waits grow and the excess stays 0; plain Slurm is left as it was
    plan, data = _alone()
    at_once = compare.predict(plan, data, None, "hivebatch", "qos", cycle_s=64.0)
    later = compare.predict(plan, data, None, "hivebatch", "qos", cycle_s=64.0, start_latency_s=5.0)
    first = {r.job.job_id: r.first_start for r in at_once.run.records}
    assert {r.job.job_id: r.first_start for r in later.run.records}["n0"] == first["n0"] + 5.0
    assert later.summary.avg_queue_s > at_once.summary.avg_queue_s
    assert later.summary.vcs["cv"]["excess_queue_s"] == pytest.approx(0.0, abs=1e-6)
    plain = compare.predict(plan, data, None, "plain", "tetris-perf", start_latency_s=5.0)
    assert (
        plain.summary.avg_queue_s
        == compare.predict(plan, data, None, "plain", "tetris-perf").summary.avg_queue_s
    )


def test_the_controller_of_a_replay_gets_its_notices_compressed_like_every_other_time() -> None:
    from hivebatch.replay.live import compressed_notice

    data = {"preemption": {"notice_s": 120, "notice_s_by_class": {"prior": 300}}}
    assert compressed_notice(data, 16) == {"notice_s": 8, "notice_s_by_class": {"prior": 19}}
    assert compressed_notice({}, 1000) == {"notice_s": 1, "notice_s_by_class": {}}  # never none at all


ANOMALY = [  # docs/simulate.md's slice: cv and sys fragment the nodes nlp's 16-GPU job needs whole
    _job("c1", 0.0, 5), _job("c2", 2.0, 5), _job("c3", 4.0, 2),
    _job("s1", 6.0, 2, vc="sys"), _job("s2", 8.0, 2, vc="sys"), _job("n1", 20.0, 16, 300.0, vc="nlp"),
]  # fmt: skip


def _scan(jobs: list[SimJob], budget_s: float, **spec: Any) -> list[Any]:
    from hivebatch.replay.find import Scan, find_slices

    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    base = SliceSpec(length_s=3600, speedup=30, max_run_s=60, **spec)
    scan = Scan(base, step_s=3600, until_s=4 * 3600, budget_s=budget_s)
    return list(
        find_slices(jobs, scan, data, None, LAB_VCS, (8, 4), ("tetris-perf", "qos"), (30.0, 330.0, 0.0))
    )


def test_the_slice_search_finds_the_window_where_plain_slurm_shows_the_anomaly() -> None:
    from hivebatch.replay.find import format_candidates

    # hour 0: the anomaly; hour 2: the same jobs without nlp's; hours 1 and 3 are empty
    later = [replace(j, job_id=j.job_id + "b", arrival=j.arrival + 7200) for j in ANOMALY if j.vc != "nlp"]
    found = _scan(ANOMALY + later, budget_s=900)
    assert [c.start_h for c in found] == [0.0, 2.0] and [c.jobs for c in found] == [6, 5]
    anomaly, calm = found
    assert anomaly.plain_excess["nlp"] > 5.0 and anomaly.hivebatch_excess["nlp"] <= 0.5
    assert max(calm.plain_excess.values()) <= 0.0 and anomaly.anomaly > calm.anomaly
    # the predicted replay: nlp's 10 trace minutes of run after its wait, at speedup 30
    assert 20 <= anomaly.wall_s <= 60
    table = format_candidates(list(reversed(found)), 0.5).splitlines()
    assert table[2].split("\t")[:2] == ["0", "6"] and "nlp+" in table[2]  # strongest first
    assert json.loads(json.dumps(anomaly.to_json()))["plain_excess_min"]["nlp"] > 5.0


def test_the_slice_search_keeps_to_the_budget_and_to_slices_hivebatch_runs_whole() -> None:
    assert _scan(ANOMALY, budget_s=10) == []  # predicted to take longer than 10 real seconds
    # sys's cells (a switch of 2 and two single GPUs) hold no 3-GPU job: hivebatch would not run it
    assert _scan([*ANOMALY, _job("s3", 30.0, 3, vc="sys")], budget_s=900) == []


def test_find_mode_lists_slices_and_refuses_a_bad_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the requeue delay is read from slurmctld; the lab's, without waiting on a slurmctld that is down
    monkeypatch.setattr(
        live, "requeue_delay", lambda: (requeue_delay_s({"AuthInfo": "cred_expire=10"}), "lab")
    )
    trace = tmp_path / "anomaly.csv"
    rows = [f"2017-10-03 10:00:{int(j.arrival):02d},{j.duration_s:.0f},{j.gpus},0,{j.vc}" for j in ANOMALY]
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(rows) + "\n")
    base = ["replay", "--trace", str(trace), "--trace-format", "philly", "--mode", "find", "--speedup", "30"]
    base += ["--config", str(PROJECT / "etc" / "hivebatch.example.yaml")]
    run_cli(cli, [*base, "--json"])
    out, err = capsys.readouterr()
    (only,) = json.loads(out)
    assert only["start_h"] == 0.0 and only["jobs"] == 6 and only["plain_excess_min"]["nlp"] > 5.0
    assert "1 slices from 0 h, 1 fit 900 s" in err
    with pytest.raises(SystemExit) as bad:
        run_cli(cli, [*base, "--step", "0"])
    out, err = capsys.readouterr()
    assert bad.value.code != 0 and out == "" and "--step and --budget must be > 0" in err


def test_the_prediction_over_the_controllers_cycle_phases() -> None:
    # the same VC alone, cycle 64 s: n0 arrives at 0, so its first decision is at the first cycle
    # after 0, which is 64 at phase 0 and 16 at phase 16; the spread's first value is the plain
    # prediction, and a live figure inside the range is told apart from one outside it
    plan, data = _alone()
    base = compare.predict(plan, data, None, "hivebatch", "qos", cycle_s=64.0)
    shifted = compare.predict(plan, data, None, "hivebatch", "qos", cycle_s=64.0, phase_s=16.0)
    assert {r.job.job_id: r.first_start for r in base.run.records}["n0"] == 64.0
    assert {r.job.job_id: r.first_start for r in shifted.run.records}["n0"] == 16.0
    spread = compare.phase_spread(plan, data, None, "qos", (64.0, 0.0, 0.0), 4)
    assert len(spread.waits_s) == 4 and spread.waits_s[0] == base.summary.avg_queue_s
    assert spread.waits_s[1] == shifted.summary.avg_queue_s
    assert (
        compare.phase_spread(plan, data, None, "qos", (64.0, 0.0, 0.0), 4, first=base).waits_s
        == spread.waits_s
    )
    assert min(spread.waits_s) < max(spread.waits_s)
    inside = spread.mean_s
    report = compare.comparison(
        {"hivebatch": (replace(base.summary, avg_queue_s=inside), base.summary)},
        64.0,
        None,
        {"hivebatch": spread},
    )
    phases = report["modes"]["hivebatch"]["sim_phases"]
    assert phases["phases"] == 4 and phases["slurm_inside"] is True
    assert phases["min_s"] == min(spread.waits_s) and phases["max_s"] == max(spread.waits_s)
    assert "sim over cycle phases\tmean wait" in compare.format_table(report)
    assert "Slurm's inside that range" in compare.format_table(report)
    outside = compare.comparison(
        {"hivebatch": (replace(base.summary, avg_queue_s=2 * max(spread.waits_s)), base.summary)},
        64.0,
        None,
        {"hivebatch": spread},
    )
    assert outside["modes"]["hivebatch"]["sim_phases"]["slurm_inside"] is False
    with pytest.raises(HivebatchError, match="phase spread needs >= 1 phase"):
        compare.phase_spread(plan, data, None, "qos", (64.0, 0.0, 0.0), 0)
