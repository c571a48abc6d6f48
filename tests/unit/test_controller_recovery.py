"""Preemption, requeued jobs resuming on their typed GPUs, and a controller killed mid-cycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from controller_support import Env, make_env

from hivebatch.controller.decide import gres_for


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path)


def _fill_with_opportunistic(env: Env) -> list[int]:
    ids = [env.submit("carol", "sys", 8, qos="opportunistic") for _ in range(4)]
    report = env.cycle()
    assert report.placed == 4, [env.job(j).reason for j in ids]
    return ids


def test_owner_preempts_opportunistic_work_which_resumes_later_on_the_same_gpus(env: Env) -> None:
    opp = _fill_with_opportunistic(env)
    env.cycle()
    owner = env.submit("alice", "cv", 8, qos="prior")
    report = env.cycle()
    assert report.placed == 1 and report.preempted == 1
    victims = [j for j in opp if env.job(j).state == "preempted"]
    assert len(victims) == 1
    victim = env.job(victims[0])
    sv = env.slurm.job(victim.slurm_job_id)
    assert sv.state == "PENDING" and sv.held and sv.reason == "job_requeued_in_held_state"
    assert victim.preemptions == 1 and "preempted by job" in victim.reason
    owner_job = env.job(owner)
    assert env.slurm.job(owner).gpus == owner_job.placement
    assert env.events(victim.slurm_job_id, "preempted")[0].data["by"] == owner
    # the owner's job ends: the victim resumes, with the same GPU indices (its gres is never re-typed)
    env.cycle()
    env.slurm.finish(owner)
    env.cycle()
    resumed = env.job(victim.slurm_job_id)
    assert resumed.state in ("placed", "running")
    env.slurm.advance(15)  # a requeued job may start again only after Slurm's credential expiry
    env.slurm.schedule()
    assert env.slurm.job(resumed.slurm_job_id).state == "RUNNING"
    assert resumed.gres == victim.gres
    updates = [c for c in env.slurm.calls if c[1] == "update_pending" and c[2][0] == victim.slurm_job_id]
    assert {c[2][3] for c in updates} == {victim.gres}


def test_requeued_job_waits_for_its_own_indices(env: Env) -> None:
    opp = _fill_with_opportunistic(env)
    env.cycle()
    owner = env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = [j for j in opp if env.job(j).state == "preempted"]
    env.cycle()
    job = env.job(victim)
    assert job.state == "preempted" and "waits until" in job.reason
    assert env.slurm.job(victim).held
    assert env.job(owner).state == "running"


class KillAfter:
    """A backend that performs ``method`` and then dies like a killed controller (before the DB commit)."""

    def __init__(self, inner: Any, method: str, before: bool = False) -> None:
        self.inner, self.method, self.before = inner, method, before

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        def die(*args: Any, **kwargs: Any) -> Any:
            if not self.before:
                attr(*args, **kwargs)
            raise SystemExit("killed")

        return die


@pytest.mark.parametrize(
    ("method", "before"), [("update_pending", True), ("update_pending", False), ("release", False)]
)
def test_killed_while_placing_then_rerun_places_exactly_once(env: Env, method: str, before: bool) -> None:
    jid = env.submit("bob", "nlp", 4)
    with pytest.raises(SystemExit):
        env.cycle(KillAfter(env.ctl, method, before))
    intended = env.job(jid)
    assert intended.intent == "place" and intended.placement  # the intent was committed before acting
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.intent is None
    assert env.slurm.job(jid).gpus == intended.placement  # where the first, killed cycle decided
    gres = {c[2][3] for c in env.slurm.calls if c[1] == "update_pending"}
    assert gres == {gres_for(next(iter(intended.placement.values())))}  # never re-typed
    assert len([e for e in env.events(jid) if e.kind == "placed"]) == 1


def test_killed_right_after_requeueing_a_victim(env: Env) -> None:
    opp = _fill_with_opportunistic(env)
    env.cycle()
    owner = env.submit("alice", "cv", 8, qos="prior")
    with pytest.raises(SystemExit):
        env.cycle(KillAfter(env.ctl, "requeue_hold"))
    env.cycle()
    env.cycle()
    states = sorted(env.job(j).state for j in opp)
    assert states == ["preempted", "running", "running", "running"]
    assert env.job(owner).state == "running"
    assert sum(1 for c in env.slurm.calls if c[1] == "requeue_hold") == 1
    running_gpus = [
        (n, i)
        for j in [*opp, owner]
        if env.slurm.job(j).state == "RUNNING"
        for n, ix in env.slurm.job(j).gpus.items()
        for i in ix
    ]
    assert len(running_gpus) == len(set(running_gpus))  # no GPU given twice


def test_job_cancelled_between_observe_and_act_is_not_an_error(env: Env) -> None:
    jid = env.submit("bob", "nlp", 2)

    class CancelFirst:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            if name == "update_pending":

                def cancel_then_update(job_id: int, **kw: Any) -> None:
                    env.slurm.as_user("bob").cancel(job_id)
                    self.inner.update_pending(job_id, **kw)

                return cancel_then_update
            return getattr(self.inner, name)

    report = env.cycle(CancelFirst(env.ctl))
    assert report.ok
    env.cycle()
    assert env.job(jid).state == "cancelled"


def test_a_resumed_job_is_predicted_to_end_as_a_fresh_one_is(env: Env) -> None:
    # Without a prediction hq and the backfill reservations fell back to Slurm's end of the job, a
    # year after its start for a job with no time limit (job_end_time_reset in job_mgr.c).
    opp = _fill_with_opportunistic(env)
    fresh = env.job(opp[0])
    assert fresh.predicted_end is not None and fresh.slack_s is not None
    run_s = (fresh.predicted_end - fresh.placed_at).total_seconds()
    env.cycle()
    owner = env.submit("alice", "cv", 8, qos="prior")
    env.cycle()
    (victim,) = [j for j in opp if env.job(j).state == "preempted"]
    env.cycle()
    env.slurm.finish(owner)
    env.cycle()
    resumed = env.job(victim)
    assert resumed.state == "placed" and resumed.predicted_end is not None
    assert (resumed.predicted_end - resumed.placed_at).total_seconds() == pytest.approx(run_s)
    assert resumed.expected_completion is not None and resumed.slack_s is not None
    assert resumed.slack_s == pytest.approx(
        (resumed.expected_completion - resumed.predicted_end).total_seconds()
    )
