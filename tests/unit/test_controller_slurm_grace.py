"""Opportunistic jobs Slurm itself preempts for a guaranteed job's CPUs or memory, running out their
QOS's GraceTime (tests/fixtures/slurm/preempt_grace.txt): the ledger follows that grace as a notice."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from hivebatch.slurm.parse import parse_squeue_json
from tests.unit.controller_support import NOTICE_CONFIG, Clock, Env, make_env

PLAIN = "#!/bin/sh\ntrain.py\n"
GRACE_S = 120


@pytest.fixture
def clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A controller with the default notice (120 s) on the fake Slurm, and its clock."""
    return Clock(make_env(tmp_path, NOTICE_CONFIG), monkeypatch)


def _running(env: Env, qos: str = "opportunistic") -> int:
    jid = env.slurm.as_user("carol").submit(PLAIN, ["-A", "sys", "-q", qos, "--gres=gpu:1"])
    assert env.cycle().placed == 1
    env.cycle()
    assert env.job(jid).state == "running"
    return jid


def test_squeue_shows_the_grace_of_a_job_slurm_preempts(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_preempt_grace.json"))}
    in_grace, preemptor, left = jobs[1585], jobs[1586], jobs[1583]
    assert (
        in_grace.state == "RUNNING" and in_grace.preempt_time is not None and in_grace.grace_end is not None
    )
    assert (in_grace.grace_end - in_grace.preempt_time).total_seconds() == 30  # GraceTime=30
    assert preemptor.preempt_time is None and preemptor.grace_end is None
    # it saved and exited 0 on its signal: COMPLETED, its preempt_time kept, no grace left
    assert left.state == "COMPLETED" and left.preempt_time == left.end_time and left.grace_end is None


def test_a_job_slurm_preempts_is_told_it_must_leave_and_until_when(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    grace_end = env.slurm.job(jid).grace_end
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.notice_until == grace_end.replace(tzinfo=None)  # type: ignore[union-attr]
    assert (job.reason or "").startswith(
        "preempted by Slurm for the CPUs or memory a higher-priority job needs"
    )
    (notice,) = env.events(jid, "notice")
    assert "requeued and held at" in notice.message
    env.cycle()
    assert len(env.events(jid, "notice")) == 1 and env.slurm.signals_sent(jid) == []  # Slurm signals it


def test_a_job_that_saved_and_left_in_its_grace_is_requeued_held_to_resume(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    env.cycle()
    clock.advance(10)
    env.slurm.finish(jid)  # its trap saved and exited 0: Slurm does not requeue a COMPLETED job
    env.cycle()
    job = env.job(jid)
    assert job.state == "preempted" and job.preemptions == 1 and job.notice_until is None
    sj = env.slurm.job(jid)
    assert sj.state == "PENDING" and sj.held and sj.reason == "job_requeued_in_held_state"
    assert (job.reason or "").startswith("preempted by a higher-priority job; it resumes on GPUs")


def test_a_job_that_left_before_any_cycle_saw_its_grace_is_requeued_too(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    clock.advance(5)
    env.slurm.finish(jid)
    env.cycle()
    assert env.job(jid).state == "preempted" and env.slurm.job(jid).held
    assert [e.kind for e in env.events(jid)][-2:] == ["notice", "preempted"]


def test_a_job_slurm_requeues_when_its_grace_ends_waits_held(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    env.cycle()
    clock.advance(GRACE_S + 1)  # Slurm requeues it (before the controller's next cycle)
    assert env.slurm.job(jid).state == "PENDING"
    env.cycle()
    job = env.job(jid)
    assert job.state == "preempted" and job.preemptions == 1 and env.slurm.job(jid).held


def test_a_job_still_running_past_its_grace_is_requeued_by_the_controller(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    env.cycle()
    clock.offset += dt.timedelta(seconds=GRACE_S + 1)  # the controller's clock only: Slurm is late
    env.cycle()
    assert env.job(jid).state == "preempted" and env.slurm.job(jid).held
    (event,) = env.events(jid, "preempted")
    assert event.message == "requeued and held: a higher-priority job needs what it holds on node1:[0]"


def test_a_job_its_owner_cancels_in_its_grace_ends_cancelled(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    env.cycle()
    env.slurm.as_user("carol").cancel(jid)
    env.cycle()
    assert env.job(jid).state == "cancelled"


def test_a_guaranteed_job_slurm_preempts_is_left_to_the_ordinary_rules(clock: Clock) -> None:
    env = clock.env
    # only the opportunistic QOS is preempted by hivebatch's settings; any other preemption is a site's own
    jid = _running(env, qos="normal")
    env.slurm.preempt_with_grace(jid, GRACE_S)
    env.cycle()
    assert env.job(jid).notice_until is None and env.events(jid, "notice") == []


def test_the_notice_of_a_job_that_left_unseen_says_when_it_was_told(clock: Clock) -> None:
    env = clock.env
    jid = _running(env)
    env.slurm.preempt_with_grace(jid, GRACE_S)
    told = env.slurm.job(jid).preempt_time
    clock.advance(5)
    env.slurm.finish(jid)
    env.cycle()
    (notice,) = env.events(jid, "notice")
    assert notice.message.endswith(
        f"told to leave at {told.strftime('%Y-%m-%d %H:%M:%S')} UTC (its --signal, else SIGTERM to its steps); "  # type: ignore[union-attr]
        "it left during its grace"
    )
