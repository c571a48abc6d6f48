"""A start time an owner sets on a job waiting for GPUs reaches the ledger through the plugin's notes:
over their hold's mark, and when they release the job before the controller's next cycle."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from controller_support import Env, make_env, with_notes_file

from hivebatch.slurm.types import SlurmError


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return with_notes_file(make_env(tmp_path), tmp_path)


def _waiting(env: Env) -> tuple[list[int], int, dt.datetime]:
    """cv full (its fillers wait for GPUs), and alice's job with --begin=now+1hour seen by the controller."""
    fillers = [env.submit("alice", "cv", 8), env.submit("alice", "cv", 4)]
    env.cycle()
    now = env.slurm.now()
    jid = env.submit("alice", "cv", 1, extra=["--begin=now+1hour"])
    env.cycle()
    return fillers, jid, now


def test_a_begin_at_submit_is_no_start_time_set_by_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sbatch turns --begin=now+1hour into one time, which the plugin records and slurmctld keeps; the
    # fake read its clock twice, and a second ticking between the reads looked like an owner's update
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    start = dt.datetime(2026, 11, 29, 17, 4, 6, 900000, tzinfo=dt.UTC)
    ticks = iter(start + dt.timedelta(seconds=0.3 * i) for i in range(10_000))
    env = with_notes_file(make_env(tmp_path, clock=lambda: next(ticks)), tmp_path)
    _waiting(env)
    assert env.events(kind="start_time") == []


def test_a_start_time_over_the_owners_hold_is_kept_and_given_back_at_release(env: Env) -> None:
    # plain Slurm keeps the hold and takes the time (owner_start_time.txt, job 2569); it was refused
    _fillers, jid, now = _waiting(env)
    alice = env.slurm.as_user("alice")
    alice.hold(jid)
    env.cycle()
    three = now + dt.timedelta(hours=3)
    alice.set_start_time(jid, three)
    assert env.slurm.job(jid).eligible_time is not None and env.slurm.job(jid).eligible_time.year == 2100
    env.cycle()
    assert [e.message for e in env.events(jid, kind="start_time")] == [
        f"its owner set its start time to {three:%Y-%m-%d %H:%M:%S} UTC"
    ]
    assert env.job(jid).reason.startswith("held by its owner")
    alice.release(jid)
    env.cycle()
    env.cycle()
    assert env.slurm.job(jid).eligible_time == three.replace(tzinfo=dt.UTC)
    assert env.job(jid).reason.startswith(f"waits for its begin time {three:%Y-%m-%d %H:%M} UTC")
    assert len(env.events(jid, kind="start_time")) == 1


def test_now_over_the_hold_lets_the_job_run_once_released(env: Env) -> None:
    fillers, jid, _now = _waiting(env)
    alice = env.slurm.as_user("alice")
    alice.hold(jid)
    env.cycle()
    alice.set_start_time(jid, None)
    env.cycle()
    assert [e.message for e in env.events(jid, kind="start_time")] == ["its owner set its start time to now"]
    alice.release(jid)
    for f in fillers:
        env.slurm.finish(f)
    env.cycle()
    env.cycle()
    assert env.job(jid).placement and env.slurm.job(jid).state == "RUNNING"


def test_a_start_time_set_and_released_within_one_cycle_is_not_lost(env: Env) -> None:
    # the release replaces Slurm's begin time before the controller has seen the new one
    _fillers, jid, now = _waiting(env)
    alice = env.slurm.as_user("alice")
    three = now + dt.timedelta(hours=3)
    alice.set_start_time(jid, three)
    alice.hold(jid)
    alice.release(jid)
    env.cycle()
    env.cycle()
    assert env.slurm.job(jid).eligible_time == three.replace(tzinfo=dt.UTC)
    assert env.job(jid).reason.startswith(f"waits for its begin time {three:%Y-%m-%d %H:%M} UTC")


def test_without_the_notes_file_a_start_time_over_the_hold_is_refused(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    _fillers, jid, _now = _waiting(env)
    env.slurm.as_user("alice").hold(jid)
    with pytest.raises(SlurmError, match="Access/permission denied"):
        env.slurm.as_user("alice").set_start_time(jid, None)
