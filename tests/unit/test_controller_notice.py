"""Preemption with notice through whole controller cycles (fake Slurm running the real job_submit.lua):
the victim gets the signal it asked for, keeps its GPUs until it leaves or its notice ends, and the
preempting job starts after; a controller stopped mid-notice carries on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.controller_support import NOTICE_CONFIG, Clock, Env, make_env

CHECKPOINTING = "#!/bin/bash\n#SBATCH --signal=B:USR1@60\ntrap 'save' USR1\nsrun train.py & wait\n"
PLAIN = "#!/bin/sh\ntrain.py\n"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    yield make_env(tmp_path, NOTICE_CONFIG)


@pytest.fixture
def clock(env: Env, monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(env, monkeypatch)


def _opportunistic(env: Env, script: str = PLAIN) -> list[int]:
    args = ["-A", "sys", "-q", "opportunistic", "--gres=gpu:8"]
    ids = [env.slurm.as_user("carol").submit(script, args) for _ in range(4)]
    assert env.cycle().placed == 4
    env.cycle()  # they run
    return ids


def _signalled(env: Env, ids: list[int]) -> dict[int, list[tuple[str, str]]]:
    return {j: env.slurm.signals_sent(j) for j in ids if env.slurm.signals_sent(j)}


def test_victim_gets_its_own_signal_keeps_its_gpus_and_is_requeued_when_the_notice_ends(
    env: Env, clock: Clock
) -> None:
    opp = _opportunistic(env, CHECKPOINTING)
    owner = env.submit("alice", "cv", 8, qos="prior")
    report = env.cycle()
    assert report.placed == 0 and report.preempted == 0
    (victim,) = _signalled(env, opp)
    # B:USR1@60: the batch shell alone, and a 60 s notice (less than the 120 s default: it asked for less)
    assert env.slurm.signals_sent(victim) == [("USR1", "batch")]
    row = env.job(victim)
    assert row.state == "running" and row.notice_until is not None and row.intent is None
    assert env.slurm.job(victim).state == "RUNNING"
    waiting = env.job(owner)
    assert waiting.state == "queued"
    assert (
        waiting.reason
        == f"waiting for job {victim} to leave its GPUs, notice ends at {row.notice_until:%Y-%m-%d %H:%M:%S} UTC"
    )
    assert (row.notice_until - report.started).total_seconds() == pytest.approx(60, abs=1)

    clock.advance(30)  # mid-notice: the same wait, no second signal, no other victim
    env.cycle()
    assert _signalled(env, opp) == {victim: [("USR1", "batch")]}
    assert env.job(owner).state == "queued" and env.slurm.job(victim).state == "RUNNING"

    clock.advance(31)  # the notice is over: requeued and held, the owner placed on its GPUs
    report = env.cycle()
    assert report.preempted == 1 and report.placed == 1
    sv = env.slurm.job(victim)
    assert sv.state == "PENDING" and sv.reason == "job_requeued_in_held_state"
    assert env.job(victim).state == "preempted" and env.job(victim).notice_until is None
    assert env.slurm.job(owner).gpus == {n: list(ix) for n, ix in env.job(victim).placement.items()}
    assert (
        env.job(victim).reason
        == f"preempted by job {owner}; it resumes when 8 GPU(s) per node are free for it"
    )


def test_a_job_without_signal_gets_sigterm_everywhere_and_the_class_notice(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env)
    env.submit("alice", "cv", 8, qos="prior")
    report = env.cycle()
    (victim,) = _signalled(env, opp)
    assert env.slurm.signals_sent(victim) == [("TERM", "all")]
    assert (env.job(victim).notice_until - report.started).total_seconds() == pytest.approx(120, abs=1)


def test_victim_leaving_early_is_requeued_and_the_owner_starts_at_once(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env, CHECKPOINTING)
    owner = env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = _signalled(env, opp)
    clock.advance(5)
    env.slurm.finish(victim)  # its trap saved a checkpoint and the script ended
    report = env.cycle()
    assert report.placed == 1
    sv = env.slurm.job(victim)
    assert sv.state == "PENDING" and sv.held
    assert ("requeue_hold", (victim,)) in [(c[1], c[2]) for c in env.slurm.calls]
    assert env.job(victim).state == "preempted"
    assert env.job(owner).state == "placed"
    # what its owner reads in hq: no longer the notice, but what it waits for now
    assert (
        env.job(victim).reason
        == f"preempted by job {owner}; it resumes when 8 GPU(s) per node are free for it"
    )


def test_victim_that_requeues_itself_is_held(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env, CHECKPOINTING)
    env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = _signalled(env, opp)
    owner = env.slurm.as_user("carol")  # `scontrol requeue $SLURM_JOB_ID` in its trap: pending, not held
    owner.requeue_hold(victim)
    owner.release(victim)
    assert not env.slurm.job(victim).held
    env.cycle()
    assert env.slurm.job(victim).held and env.job(victim).state == "preempted"


def test_owner_cancelling_in_notice_ends_the_job(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env)
    env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = _signalled(env, opp)
    env.slurm.as_user("carol").cancel(victim)
    env.cycle()
    assert env.job(victim).state == "cancelled" and env.slurm.job(victim).state == "CANCELLED"


def test_a_controller_stopped_before_the_signal_sends_it_next_cycle(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env)
    env.submit("alice", "cv", 8, qos="prior")
    broken = env.ctl
    sent = broken.signal
    broken.signal = lambda *a: (_ for _ in ()).throw(KeyboardInterrupt())  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        env.cycle(broken)
    assert _signalled(env, opp) == {}
    (victim,) = [j for j in opp if env.job(j).intent == "notice"]
    until = env.job(victim).notice_until
    broken.signal = sent  # type: ignore[method-assign]
    env.cycle()
    assert _signalled(env, opp) == {victim: [("TERM", "all")]}
    assert env.job(victim).notice_until == until and env.job(victim).intent is None


def test_the_victim_that_ran_the_shortest_is_told_to_leave(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env)
    clock.advance(3600)
    env.slurm.finish(opp[2])  # node3 frees up, and a fresh opportunistic job takes it
    env.cycle()
    fresh = env.slurm.as_user("carol").submit(PLAIN, ["-A", "sys", "-q", "opportunistic", "--gres=gpu:8"])
    env.cycle()
    env.cycle()
    assert env.job(fresh).state == "running"
    clock.advance(60)
    env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    # an hour of 8 GPUs' work on each of the others, one minute on the fresh one
    assert _signalled(env, [*opp, fresh]) == {fresh: [("TERM", "all")]}


def test_a_lower_class_of_the_same_vc_gets_its_notice_too(env: Env, clock: Clock) -> None:
    low = env.submit("alice", "cv", 8, qos="normal")
    env.cycle()
    env.cycle()
    assert env.job(low).state == "running"
    high = env.submit("alice", "cv", 8, qos="urgent")
    env.cycle()
    assert env.slurm.signals_sent(low) == [("TERM", "all")]
    assert env.job(high).state == "queued" and f"job {low} to leave" in (env.job(high).reason or "")
    clock.advance(121)
    env.cycle()
    assert env.job(low).state == "preempted" and env.job(high).state == "placed"


def test_a_notice_that_ended_while_the_controller_was_down_is_carried_out(env: Env, clock: Clock) -> None:
    opp = _opportunistic(env)
    owner = env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = _signalled(env, opp)
    clock.advance(600)  # no cycle for ten minutes
    report = env.cycle()
    assert report.preempted == 1 and report.placed == 1
    assert env.slurm.job(victim).held and env.job(victim).state == "preempted"
    assert env.job(owner).state == "placed"
    assert env.slurm.signals_sent(victim) == [("TERM", "all")]  # told once, not again


def test_the_waiting_job_is_predicted_to_start_when_the_notice_ends(env: Env, clock: Clock) -> None:
    low = env.submit("alice", "cv", 8, qos="normal", time_limit_s=36000)
    env.cycle()
    env.cycle()
    high = env.submit("alice", "cv", 8, qos="urgent")
    env.cycle()
    until = env.job(low).notice_until
    assert until is not None
    assert env.job(high).predicted_start == until  # not the victim's ten-hour time limit


def test_a_victim_does_not_come_back_while_the_job_it_left_for_waits(env: Env, clock: Clock) -> None:
    first = env.submit("bob", "nlp", 8, qos="normal", time_limit_s=3600)
    env.cycle()
    env.cycle()
    clock.advance(60)
    head = env.submit("bob", "nlp", 16, qos="prior", nodes=2, gpus_per_node=8, time_limit_s=3600)
    second = env.submit("bob", "nlp", 8, qos="normal", time_limit_s=3600)
    env.cycle()  # first is told to leave; second takes the free node (it can meet its deadline)
    env.slurm.finish(first)  # first leaves at its signal
    clock.advance(10)
    env.cycle()  # first is requeued; second is told to leave too
    assert env.slurm.signals_sent(second) == [("TERM", "all")]
    clock.advance(10)
    newcomer = env.submit("bob", "nlp", 1, qos="normal", time_limit_s=600)
    env.cycle()  # first's GPUs are free, but head still waits for second: nobody of nlp takes them
    kept = env.job(first)
    assert kept.state == "preempted" and kept.intent is None
    assert kept.reason == f"preempted by job {head}; it resumes once that job has started"
    assert env.job(newcomer).state == "queued"
    assert env.job(newcomer).reason == f"behind job {head}, which waits for the jobs it preempted to leave"
    clock.advance(120)
    env.cycle()  # second's notice is over: head takes both nodes
    assert env.job(head).state == "placed" and env.job(second).state == "preempted"
    assert env.slurm.signals_sent(first) == [("TERM", "all")]  # told once


def test_a_victim_names_its_preemptor_as_squeue_shows_it() -> None:
    import datetime as dt

    from hivebatch.controller.notice import write_notice
    from hivebatch.controller.preemption import preemptor
    from hivebatch.db.models import Job
    from hivebatch.slurm.types import SlurmJob

    task = SlurmJob(job_id=1949, name="arr", user="alice", account="cv", qos="normal", state="PENDING",
                    reason="", array_job_id=1948, array_task_id=0)  # fmt: skip
    listed = {1949: task}
    assert preemptor(1949, listed) == "job 1948_0"
    assert preemptor(7, listed) == "job 7"  # one Slurm no longer lists
    assert preemptor(None, listed) == "a higher-priority job"
    victim = Job(slurm_job_id=5)
    write_notice(victim, 1949, dt.datetime(2026, 11, 30, 11, 0), slurm=listed)
    assert victim.notice_by == 1949
    assert victim.reason is not None and victim.reason.startswith(
        "preempted by job 1948_0: told to leave its GPUs"
    )


def test_a_victim_once_held_at_submit_by_its_owner_is_not_left_held_after_its_preemption(
    env: Env, clock: Clock
) -> None:
    # the plugin records an sbatch --hold in the request; it said "held by its owner" again after the
    # controller's own requeue-hold, long after the owner had released the job
    args = ["-A", "sys", "-q", "opportunistic", "--gres=gpu:8", "--hold"]
    opp = [env.slurm.as_user("carol").submit(PLAIN, args) for _ in range(4)]
    env.cycle()
    assert all(env.job(j).reason.startswith("held by its owner") for j in opp)
    for j in opp:
        env.slurm.as_user("carol").release(j)
    env.cycle()
    clock.advance(30)
    env.cycle()
    env.cycle()
    assert all(env.job(j).state == "running" for j in opp)
    owner = env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = _signalled(env, opp)
    clock.advance(121)
    env.cycle()
    assert env.job(victim).state == "preempted"
    env.cycle()
    assert not env.job(victim).reason.startswith("held by its owner"), env.job(victim).reason
    env.slurm.finish(owner)
    env.cycle()
    env.cycle()
    assert env.job(victim).state in ("placed", "running"), env.job(victim).reason
