"""An srun or salloc is told in its terminal why its job waits (its first reason) and why it was
rejected, once each, when the controller runs as root or SlurmUser (Slurm refuses an Operator's notify)."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import Env, make_env

from hivebatch.controller.decide.types import Wait
from hivebatch.controller.tell import tell_clients
from hivebatch.db.models import Job
from hivebatch.slurm.types import SlurmError

# a model hint past its bound (limits.iters): Slurm takes the comment, the controller rejects the job
HOSTILE = {"model": "resnet50", "batch_size": 32, "iters": 10**18}


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path)


def test_the_terminal_of_a_rejected_interactive_job_hears_why_once(env: Env) -> None:
    jid = env.submit("alice", "cv", 1, **HOSTILE)
    env.slurm.as_interactive(jid)
    for _ in range(3):
        env.cycle(env.slurm)  # root
    assert env.job(jid).state == "rejected"
    (said,) = env.slurm.terminal(jid)
    assert said == f"hivebatch: job {jid} cannot be placed: {env.job(jid).reason}"


def test_a_waiting_interactive_job_hears_its_first_reason_only(env: Env) -> None:
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 4)
    env.cycle(env.slurm)  # cv's 12 GPUs all taken
    jid = env.submit("alice", "cv", 4)
    env.slurm.as_interactive(jid)
    for _ in range(3):
        env.cycle(env.slurm)
    assert env.job(jid).state == "queued"
    (said,) = env.slurm.terminal(jid)
    assert said.startswith(f"hivebatch: job {jid} waits: ") and env.job(jid).reason in said


def test_the_operator_does_not_try_what_slurm_would_refuse_it(env: Env) -> None:
    jid = env.submit("alice", "cv", 1, **HOSTILE)
    env.slurm.as_interactive(jid)
    env.cycle()  # as the Operator
    assert env.job(jid).state == "rejected"
    assert not [c for c in env.slurm.calls if c[1] == "notify"]
    with pytest.raises(SlurmError, match="Invalid user id"):
        env.ctl.notify(jid, "x")


def test_a_rejected_batch_job_is_left_to_hq(env: Env) -> None:
    jid = env.submit("alice", "cv", 1, **HOSTILE)
    env.cycle(env.slurm)
    assert env.job(jid).state == "rejected"
    assert not [c for c in env.slurm.calls if c[1] == "notify"]


def test_a_client_gone_meanwhile_does_not_stop_the_others_being_told(env: Env) -> None:
    gone, waiting = env.submit("alice", "cv", 1), env.submit("alice", "cv", 1)
    for jid in (gone, waiting):
        env.slurm.as_interactive(jid)
    env.slurm.cancel(gone)  # its srun was interrupted: Slurm no longer holds it pending
    view = {j: env.slurm.job(j) for j in (gone, waiting)}
    waits = [Wait(Job(slurm_job_id=j), "no such GPU type", rejected=True) for j in (gone, waiting)]
    assert tell_clients(env.slurm, waits, view) == 1
    assert env.slurm.terminal(waiting) == [f"hivebatch: job {waiting} cannot be placed: no such GPU type"]


def test_the_fake_refuses_notify_as_slurm_does(env: Env) -> None:
    batch = env.submit("alice", "cv", 1)
    assert env.slurm.job(batch).batch
    with pytest.raises(SlurmError, match="Requested operation is presently disabled"):
        env.slurm.notify(batch, "x")
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        env.slurm.notify(999999, "x")
