"""hq's rows: Slurm merged with the ledger, filters, formats, JSON."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hivebatch.cli.hq.columns import Column, parse_format, render_plain
from hivebatch.cli.hq.rows import Filters, collect_rows, parse_states, plain_reason
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest
from hivebatch.state import formats
from hivebatch.state.formats import format_placement, format_slack

NOW = dt.datetime(2026, 11, 21, 12, 0, 0)


def sjob(
    job_id: int, user: str, state: str, reason: str = "None", gpus=None, req: JobRequest | None = None, **kw
):
    base = dict(
        job_id=job_id, name=f"job{job_id}", user=user, account=req.vc if req else "cv", qos=req.qos if req else "normal",
        state=state, reason=reason, nodes=list((gpus or {}).keys()), gpus=gpus or {}, shards={},
        admin_comment=req.to_admin_comment() if req else "", comment=req.hints_comment() if req else "",
        submit_time=NOW - dt.timedelta(minutes=10),
        start_time=NOW - dt.timedelta(minutes=5) if state == "RUNNING" else None, end_time=None,
        time_limit_s=3600, num_nodes=1, held=reason.startswith("JobHeld"), exit_code=None,
    )  # fmt: skip
    base.update(kw)
    return SimpleNamespace(**base)


def dbjob(job_id: int, state: str, **kw):
    base = dict(
        slurm_job_id=job_id, name=f"job{job_id}", user="alice", account="cv", vc_name="cv", qos="normal",
        priority=0, foreign=False, request=None, gpus=2, gpu_type=None, state=state, reason=None, placement=None,
        predicted_start=None, predicted_end=None, expected_completion=None, slack_s=None, submit_time=None,
        start_time=None, end_time=None, preemptions=0, notice_until=None, notice_by=None,
    )  # fmt: skip
    base.update(kw)
    return SimpleNamespace(**base)


def test_placement_format() -> None:
    assert format_placement({"node2": [5, 3]}) == "node2:[3,5]"
    assert format_placement({"node3": [0, 1], "node1": [0, 1]}) == "node1:[0,1] node3:[0,1]"
    assert format_placement({}) == ""


def test_slurm_only_rows_before_the_controller_ran() -> None:
    req = JobRequest(vc="cv", qos="prior", gpus=2)
    rows = collect_rows(
        [
            sjob(7, "alice", "PENDING", "JobHeldAdmin", req=req),
            sjob(8, "bob", "RUNNING", gpus={"node1": [0]}),
        ],
        [],
        Filters(),
    )
    assert [r.job_id for r in rows] == [8, 7]  # running first
    pend = rows[1]
    assert (pend.vc, pend.qos, pend.gpus, pend.hivebatch_state) == ("cv", "prior", 2, None)
    assert "controller" in pend.reason
    assert rows[0].placement == {"node1": [0]} and rows[0].hivebatch is False


def test_without_a_config_a_held_job_does_not_claim_the_controller_has_not_looked() -> None:
    # seen on the lab: hq run without HIVEBATCH_CONFIG said "waiting for the hivebatch controller to
    # look at it" of a job the controller had judged a minute earlier (waiting for its dependency)
    req = JobRequest(vc="sys", gpus=1)
    held = [sjob(7, "carol", "PENDING", "JobHeldUser", req=req), sjob(8, "carol", "PENDING", "Dependency")]
    rows = collect_rows(held, [], Filters(), ledger_found=False)
    assert rows[0].reason.startswith("held for hivebatch: set HIVEBATCH_CONFIG")
    assert rows[1].reason == plain_reason("Dependency")  # not hivebatch's: Slurm's own reason stays
    assert collect_rows(held, [], Filters())[0].reason == "waiting for the hivebatch controller to look at it"


def test_ledger_adds_predictions_reason_and_slack() -> None:
    req = JobRequest(vc="cv", gpus=2)
    ect = NOW + dt.timedelta(hours=2)
    rows = collect_rows(
        [
            sjob(1, "alice", "PENDING", "JobHeldAdmin", req=req),
            sjob(2, "alice", "RUNNING", gpus={"node2": [3, 5]}, req=req),
        ],
        [
            dbjob(1, "queued", reason="VC cv has no free V100-SWITCH cell", predicted_start=NOW + dt.timedelta(minutes=30),
                  predicted_end=NOW + dt.timedelta(minutes=90), expected_completion=ect),
            dbjob(2, "running", placement={"node2": [3, 5]}, predicted_end=NOW + dt.timedelta(minutes=20),
                  expected_completion=ect),
        ],
        Filters(),
    )  # fmt: skip
    running, pending = rows
    assert running.placement == {"node2": [3, 5]} and running.hivebatch_state == "running"
    assert running.slack_s == pytest.approx(100 * 60)
    assert pending.reason == "VC cv has no free V100-SWITCH cell"
    assert pending.slack_s == pytest.approx(30 * 60)
    data = pending.to_json()
    for key in (
        "job_id",
        "user",
        "vc",
        "qos",
        "state",
        "gpus",
        "placement",
        "predicted_start",
        "predicted_end",
        "reason",
    ):
        assert key in data
    assert data["predicted_start"] == "2026-11-21T12:30:00Z"
    json.dumps([r.to_json() for r in rows])


def test_placed_but_not_started_shows_chosen_gpus() -> None:
    req = JobRequest(vc="cv", gpus=2)
    rows = collect_rows(
        [sjob(3, "alice", "PENDING", "Priority", req=req)],
        [dbjob(3, "placed", placement={"node1": [0, 1]}, predicted_start=NOW)],
        Filters(),
    )
    assert rows[0].placement == {"node1": [0, 1]}
    assert "released" in rows[0].reason


def test_finished_jobs_only_on_request() -> None:
    ledger = [dbjob(9, "done", end_time=NOW, placement={"node1": [0]})]
    assert collect_rows([], ledger, Filters()) == []
    rows = collect_rows([], ledger, Filters(all_states=True))
    assert rows[0].state == "COMPLETED" and rows[0].placement == {"node1": [0]}
    assert collect_rows([], ledger, Filters(job_ids={9}))[0].job_id == 9


def test_filters() -> None:
    a = JobRequest(vc="cv", qos="urgent")
    b = JobRequest(vc="nlp")
    jobs = [sjob(1, "alice", "RUNNING", req=a), sjob(2, "bob", "PENDING", "JobHeldAdmin", req=b)]
    assert [r.job_id for r in collect_rows(jobs, [], Filters(users={"bob"}))] == [2]
    assert [r.job_id for r in collect_rows(jobs, [], Filters(accounts={"cv"}))] == [1]
    assert [r.job_id for r in collect_rows(jobs, [], Filters(qos={"urgent"}))] == [1]
    assert [r.job_id for r in collect_rows(jobs, [], Filters(states={"PENDING"}))] == [2]
    assert [r.job_id for r in collect_rows(jobs, [], Filters(job_ids={1}))] == [1]


def test_states_parse() -> None:
    assert parse_states("PD,running") == ({"PENDING", "RUNNING"}, False)
    assert parse_states("all") == (None, True)
    with pytest.raises(HivebatchError, match="unknown state"):
        parse_states("SLEEPING")


def test_a_requeued_job_waiting_out_its_credential_is_not_said_to_wait_for_a_begin_time(
    slurm_fixture,
) -> None:
    # recorded on the lab: alice's `scontrol requeue` of her running --gpus=1 job (no --begin); squeue
    # says BeginTime until cred_expire has passed
    from hivebatch.slurm.parse import parse_squeue_json

    (job,) = parse_squeue_json(slurm_fixture("squeue_requeued_begin.json"))
    assert (job.state, job.reason, job.restarts) == ("PENDING", "BeginTime", 1)
    (row,) = collect_rows([job], [], Filters(states={"PENDING"}))
    assert (
        row.reason
        == "requeued; Slurm lets it start again at 11:34:58 UTC, once its last run's credential expires"
    )
    (fresh,) = collect_rows([dataclasses.replace(job, restarts=0)], [], Filters(states={"PENDING"}))
    assert fresh.reason == plain_reason("BeginTime") == "waiting for its --begin time"


def test_a_placed_job_slurm_has_not_started_and_plain_jobs_get_reasons_of_their_own(slurm_fixture) -> None:
    # recorded on the lab: every node's CPUs taken by carol's CPU-only jobs; alice's 339, pinned to
    # node2 g0,g1 while node2's CPUs were still free, waits "Resources" though no job holds its GPUs;
    # hq said "Slurm is waiting for its GPUs to be freed", and "released" of carol's CPU jobs
    from hivebatch.slurm.parse import parse_squeue_json

    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_pending_reasons.json"))}
    assert {i: jobs[i].reason for i in (339, 340, 341)} == {
        339: "Resources",
        340: "Resources",
        341: "Priority",
    }
    assert not any(jobs[335].gpus.values()) and jobs[335].nodes == ["node2"]  # the CPU job beside 339's GPUs
    placed_at = dt.datetime(2026, 11, 28, 13, 39, 54)
    run = dt.timedelta(minutes=3)
    ledger = [
        dbjob(
            339,
            "placed",
            placement={"node2": [0, 1]},
            placed_at=placed_at,
            predicted_start=placed_at,
            predicted_end=placed_at + run,
        )
    ]
    rows = {r.job_id: r for r in collect_rows(jobs.values(), ledger, Filters(), start_timeout_s=300.0)}
    assert rows[339].placement == {"node2": [0, 1]}
    # its START and END are Slurm's estimate (squeue --start: when carol's 335 ends), not "now"
    slurms = dt.datetime(2026, 11, 28, 13, 45, 55)
    assert (rows[339].predicted_start, rows[339].predicted_end) == (slurms, slurms + run)
    assert rows[339].reason == (
        "released; Slurm waits for room beside its GPUs (CPUs or memory other jobs hold, a job told to "
        "leave them, or a job of higher priority it keeps the node for); hivebatch places it elsewhere if it "
        "has not started by 13:44:54 UTC"
    )
    assert rows[340].reason == "waiting for resources to be freed"
    assert rows[341].reason == "waiting for jobs of higher priority"
    # an opportunistic job Slurm is preempting on node2 for 339 (in its grace): the controller allows that
    # notice on top of the bound (decide.unstarted.grace_on)
    leaving = dbjob(335, "running", qos="opportunistic", placement={"node2": [4]},
                    notice_until=placed_at + dt.timedelta(seconds=120))  # fmt: skip
    graced = {
        r.job_id: r
        for r in collect_rows(
            jobs.values(), [*ledger, leaving], Filters(), start_timeout_s=300.0, grace_s=120.0
        )
    }
    assert graced[339].reason.endswith(
        "has not started by 13:46:54 UTC; job 335 leaves by 13:41:54 UTC at the latest (Slurm's notice to it)"
    )
    # without the controller's bound (no config), the promise is left out
    bare = {r.job_id: r for r in collect_rows(jobs.values(), ledger, Filters())}
    assert bare[339].reason.endswith("or a job of higher priority it keeps the node for)")


def test_plain_reasons() -> None:
    assert "depends" in plain_reason("Dependency")
    assert "preempted" in plain_reason("job_requeued_in_held_state")
    assert plain_reason("None") is None
    assert plain_reason("SomethingNew") == "SomethingNew"


def test_slack_words() -> None:
    assert format_slack(720) == "+12m"
    assert format_slack(-300) == "-5m"
    assert format_slack(3900) == "+1h05m"
    assert format_slack(None) == "-"
    assert format_slack(-0.4) == "+0s"  # seen in hq: a prediction 0.4 s past the ECT read "-0s"


def test_times_far_away_carry_their_year(monkeypatch: pytest.MonkeyPatch) -> None:
    # seen in hq: Slurm's start estimate a year on (a node held by jobs without a time limit) read as today
    monkeypatch.setattr(formats, "_local", lambda t: t and t.replace(tzinfo=dt.UTC))  # shown in UTC
    now = dt.datetime(2026, 11, 28, 18, 30)
    assert formats.format_time(dt.datetime(2026, 11, 28, 19, 0), now) == "19:00"
    assert formats.format_time(dt.datetime(2026, 12, 2, 9, 0), now) == "12-02 09:00"
    assert formats.format_time(dt.datetime(2027, 11, 28, 18, 29), now) == "2027-11-28 18:29"


def test_squeue_style_format() -> None:
    rows = collect_rows(
        [sjob(42, "alice", "RUNNING", gpus={"node2": [3, 5]}, req=JobRequest(vc="cv", gpus=2))], [], Filters()
    )
    pieces, literal = parse_format("%.6i|%u|%a|%N")
    assert render_plain(rows, pieces, literal, True, NOW).splitlines() == [
        " JOBID|USER |VC|PLACEMENT",
        "    42|alice|cv|node2:[3,5]",
    ]
    pieces, literal = parse_format("jobid,placement")
    assert render_plain(rows, pieces, literal, False, NOW) == "42 node2:[3,5]"
    with pytest.raises(HivebatchError, match="unknown field %Z"):
        parse_format("%Z")
    with pytest.raises(HivebatchError, match="unknown field 'bogus'"):
        parse_format("jobid,bogus")


def test_default_columns_plain() -> None:
    rows = collect_rows(
        [sjob(5, "carol", "PENDING", "JobHeldAdmin", req=JobRequest(vc="sys"))], [], Filters()
    )
    text = render_plain(rows, [Column("jobid"), Column("vc"), Column("reason")], False, True, NOW)
    assert text.splitlines()[0].split() == ["JOBID", "VC", "REASON"]
    assert text.splitlines()[1].split()[:2] == ["5", "sys"]


def test_urgent_job_whose_ect_is_its_submission_shows_asap_not_a_negative_slack() -> None:
    submitted = NOW - dt.timedelta(minutes=10)
    urgent, normal = JobRequest(vc="cv", qos="urgent"), JobRequest(vc="cv")
    rows = collect_rows(
        [
            sjob(1, "alice", "RUNNING", gpus={"node1": [4]}, req=urgent),
            sjob(2, "alice", "RUNNING", gpus={"node1": [5]}, req=normal),
        ],
        [
            dbjob(1, "running", qos="urgent", placement={"node1": [4]}, expected_completion=submitted,
                  predicted_end=NOW + dt.timedelta(minutes=50)),
            dbjob(2, "running", placement={"node1": [5]}, expected_completion=NOW + dt.timedelta(hours=2),
                  predicted_end=NOW + dt.timedelta(minutes=50)),
        ],
        Filters(),
    )  # fmt: skip
    pieces, literal = parse_format("jobid,slack")
    lines = render_plain(rows, pieces, literal, False, NOW).splitlines()
    assert [line.split()[-1] for line in lines] == ["asap", "+1h10m"]


def test_a_job_waiting_for_its_begin_time_starts_then_in_hq_as_in_squeue() -> None:
    # seen on the lab: squeue --start showed a --begin job's start (12:24:15), hq's START "-"
    begin = NOW + dt.timedelta(hours=1)
    rows = collect_rows(
        [sjob(7, "alice", "PENDING", "JobHeldUser", req=JobRequest(vc="cv"), expected_start=begin),
         sjob(8, "alice", "PENDING", "JobHeldUser", req=JobRequest(vc="cv"))],
        [dbjob(7, "queued", reason="waits for its begin time"), dbjob(8, "queued", reason="held by its owner")],
        Filters(),
    )  # fmt: skip
    text = render_plain(rows, [Column("jobid"), Column("start")], False, False, NOW)
    assert text.splitlines() == [
        f"7 {formats.format_time(begin, NOW)}",
        "8 -",
    ]  # local time, as squeue shows it
    assert formats.format_time(begin, NOW) == begin.replace(tzinfo=dt.UTC).astimezone().strftime("%H:%M")


def test_the_plugins_begin_time_marks_are_no_start_and_no_begin_time_of_the_owners() -> None:
    # seen on the lab: a job its owner released before the controller placed it has the plugin's begin
    # time 2100-01-01, which squeue --start shows as its start; hq said "waiting for its --begin time"
    mark = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    (row,) = collect_rows(
        [
            sjob(
                9,
                "alice",
                "PENDING",
                "BeginTime",
                req=JobRequest(vc="cv"),
                expected_start=mark,
                eligible_time=mark,
            )
        ],
        [],
        Filters(),
    )
    assert (
        row.slurm_expected_start is None
        and row.reason == "waiting for the hivebatch controller to look at it"
    )
    text = render_plain([row], [Column("jobid"), Column("start")], False, False, NOW)
    assert text == "9 -"


def test_a_plain_job_its_owner_holds_is_told_released_by_its_own_id() -> None:
    # seen on the lab: hq said "scontrol release JOBID" of the Operator's `sbatch --hold` job 120
    rows = collect_rows([sjob(120, "hbctl", "PENDING", "JobHeldUser"), sjob(121, "hbctl", "PENDING",
                         "JobHeldUser", display_id="121_3")], [], Filters())  # fmt: skip
    assert sorted(r.reason for r in rows) == [
        "held by its owner (scontrol release 120 to let it go)",
        "held by its owner (scontrol release 121_3 to let it go)",
    ]


def test_a_job_named_in_brackets_is_shown_as_it_is_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    # seen on the lab: a job named "[/]" by any user stopped every hq on a terminal (rich's MarkupError)
    from hivebatch.cli.hq.columns import render_rich

    rows = collect_rows([sjob(371, "alice", "PENDING", "Priority", name="[/]"), sjob(372, "alice", "PENDING",
                         "Priority", name="[bold red]x[/")], [], Filters())  # fmt: skip
    render_rich(rows, ["jobid", "name"], NOW)
    out = capsys.readouterr().out
    assert "[/]" in out and "[bold red]x[/" in out


def test_a_vcs_reason_in_brackets_is_shown_as_it_is_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from hivebatch.cli.hq.vc import _rich

    report = {"vc": "cv", "gpus_total": 12, "gpus_used": 1, "gpus_free": 11, "cells": [], "reason": "job [/] waits",
              "bound_cells": [], "jobs": [{"job_id": 7, "opportunistic": False, "placement": {"node1": [0]}}]}  # fmt: skip
    _rich(report)
    out = capsys.readouterr().out
    assert "job [/] waits" in out and "job 7: node1:[0]" in out


def test_a_start_time_is_printed_as_slurm_prints_it_under_slurm_time_format() -> None:
    # hq --start printed ISO times under SLURM_TIME_FORMAT=relative (tests/fixtures/squeue/time_format.txt)
    import re

    from hivebatch.cli.hq.columns import slurm_time_text

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "squeue" / "time_format.txt").read_text()
    blocks = re.findall(r"^\$ SLURM_TIME_FORMAT='([^']*)'.*\n((?:[^$#].*\n)+)", text, re.MULTILINE)
    printed = {fmt: dict(line.split(" ", 1) for line in body.splitlines()) for fmt, body in blocks}
    times = {job: dt.datetime.fromtimestamp(int(t), dt.UTC) for job, t in printed.pop("%s").items()}
    assert len(printed) == 3 and len(times) == 4
    for fmt, shown in printed.items():
        for job, when in times.items():
            assert slurm_time_text(when, fmt, today=dt.date(2026, 11, 30)) == shown[job], (fmt, job)
    assert slurm_time_text(times["1997"], "bogus") == "2026-12-01T20:34:12"  # squeue: "invalid …", then ISO
