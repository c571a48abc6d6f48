"""Slurm outages on the fake Slurm: a cycle that cannot trust Slurm changes nothing; jobs end only on
positive evidence; a job closed by mistake is reopened; the loop survives any failed cycle."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from controller_support import Env, make_env
from sqlalchemy import func, select

from hivebatch.controller.lease import ControllerLease
from hivebatch.controller.runner import backoff, run_loop
from hivebatch.db import Base, Event, Job
from hivebatch.slurm.types import AcctRecord, SlurmError, SlurmJob, SlurmUnavailable
from hivebatch.testing.fake_slurm import FakeSlurm


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def _ledger(env: Env) -> list[tuple[int, str, str | None, object]]:
    with env.factory() as s:
        return [
            (j.slurm_job_id, j.state, j.intent, j.placement) for j in s.scalars(select(Job).order_by(Job.id))
        ]


def _events(env: Env) -> int:
    with env.factory() as s:
        return int(s.scalar(select(func.count()).select_from(Event)) or 0)


def _busy(env: Env) -> tuple[int, int]:
    running = env.submit("alice", "cv", 2)
    waiting = env.submit("bob", "nlp", 16)
    env.cycle()
    env.submit("bob", "nlp", 16)
    env.cycle()
    return running, waiting


def test_a_cycle_while_slurmctld_is_down_changes_nothing(env: Env) -> None:
    _busy(env)
    before, events = _ledger(env), _events(env)
    env.slurm.stop_controller()
    with pytest.raises(SlurmUnavailable, match="Slurm is unavailable"):
        env.cycle()
    assert _ledger(env) == before and _events(env) == events


def test_nodes_not_registered_after_a_restart_change_nothing(env: Env) -> None:
    running, _waiting = _busy(env)
    before = _ledger(env)
    env.slurm.stop_controller()
    env.slurm.start_controller(register=False)
    with pytest.raises(SlurmUnavailable, match="no node has registered"):
        env.cycle()
    assert _ledger(env) == before
    env.slurm.register_nodes()
    env.cycle()
    assert env.job(running).state == "running" and not env.events(kind="finished")


def test_an_empty_queue_after_a_full_one_needs_slurmctld_to_answer(env: Env) -> None:
    running, _ = _busy(env)
    before = _ledger(env)

    class Forgetful(FakeSlurm):
        up = False

        def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
            return []

        def ping(self) -> None:
            if not self.up:
                raise SlurmUnavailable(["scontrol", "ping"], "Slurmctld(primary) at fake is DOWN", 1)

    forgetful = Forgetful(user="hbctl", _state=env.slurm._s)
    with pytest.raises(SlurmUnavailable, match="is DOWN"):
        env.cycle(forgetful)
    assert _ledger(env) == before
    # slurmctld answers: the empty list is believed, but nothing ends without a final state
    forgetful.up = True
    env.cycle(forgetful)
    job = env.job(running)
    assert job.state == "running" and "kept as it is until Slurm reports how it ended" in (job.reason or "")


def test_a_job_ends_only_on_a_final_state_from_accounting(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    env.cycle()
    answers: list[list[AcctRecord] | Exception] = [SlurmError(["sacct"], 1, "slurmdbd down"), []]

    class Vanished(FakeSlurm):
        def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
            return [j for j in super().list_jobs(job_ids) if j.job_id != jid]

        def history(self, job_ids=None, since=None):  # noqa: ANN001, ANN202
            answer = answers.pop(0) if answers else super().history(job_ids, since)
            if isinstance(answer, Exception):
                raise answer
            return answer

    vanished = Vanished(user="hbctl", _state=env.slurm._s)
    vanished.ping()
    env.cycle(vanished)  # accounting unreadable
    assert env.job(jid).state == "running"
    env.cycle(vanished)  # no record yet
    assert env.job(jid).state == "running"
    env.slurm.finish(jid)
    env.cycle(vanished)  # accounting: COMPLETED
    assert env.job(jid).state == "done"
    assert [e.kind for e in env.events(jid)][-3:] == ["unseen", "unseen", "finished"]


def test_a_job_closed_by_mistake_is_reopened_when_slurm_lists_it(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    with env.factory() as s:
        row = s.scalars(select(Job).where(Job.slurm_job_id == jid)).one()
        row.state, row.reason = "failed", "no longer known to Slurm and not in its accounting"
        s.commit()
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.end_time is None
    kinds = [e.kind for e in env.events(jid)]
    assert kinds[-3:] == ["reopened", "started_unplaced", "started"]


def test_a_reopened_pending_job_is_placed_again(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    with env.factory() as s:
        s.add(Job(slurm_job_id=jid, state="cancelled", foreign=False, priority=0, gpus=1, vc_name="cv",
                  qos="normal", request={"vc": "cv", "qos": "normal", "gpus": 1}))  # fmt: skip
        s.commit()
    env.cycle()
    assert env.job(jid).state in ("placed", "running")
    assert env.events(jid, kind="reopened")


def test_the_loop_survives_any_failed_cycle_and_backs_off(env: Env, tmp_path: Path) -> None:
    class Flaky(FakeSlurm):
        failures = [
            SlurmUnavailable(["squeue", "--json"], "down"),
            RuntimeError("boom"),
            OverflowError("big"),
        ]

        def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
            if self.failures:
                raise self.failures.pop(0)
            return super().list_jobs(job_ids)

    jid = env.submit("alice", "cv", 1)
    engine = env.factory.kw["bind"]
    Base.metadata.create_all(engine)
    lease = ControllerLease(engine)
    lease.acquire()
    waits: list[float] = []
    run_loop(env.ctx, env.factory, Flaky(user="hbctl", _state=env.slurm._s), lease, 1.0,
             sleep=waits.append, cycles=5)  # fmt: skip
    assert [round(w) for w in waits] == [1, 2, 4, 1, 1]
    assert env.job(jid).state == "running"


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff(60, n) for n in range(0, 5)] == [60, 60, 120, 240, 300]
    assert backoff(1, 30) == 300 and backoff(600, 3) == 600


def test_the_loop_spares_its_collections_what_it_held_before_its_first_cycle(env: Env) -> None:
    engine = env.factory.kw["bind"]
    Base.metadata.create_all(engine)
    lease = ControllerLease(engine)
    lease.acquire()
    gc.unfreeze()
    try:
        run_loop(env.ctx, env.factory, env.slurm, lease, 1.0, sleep=lambda _s: None, cycles=1)
        assert gc.get_freeze_count() > 0  # the context and the modules are no longer walked
    finally:
        gc.unfreeze()
