"""Nothing is placed on a node Slurm has not heard from; a job Slurm runs on other GPU indices than
granted is an incident: requeued, held and placed again on its granted GPUs — never accepted."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from controller_support import Env, make_env
from sqlalchemy import select

from hivebatch.cells import NodeSpec
from hivebatch.controller import incidents
from hivebatch.controller.reconcile.rebuild import why_unusable
from hivebatch.db.models import Job
from hivebatch.slurm.types import SlurmNode


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def _node(state: str, gpus: int = 8) -> SlurmNode:
    return SlurmNode("node1", state, bad=False, gpu_indices=list(range(gpus)))


def _two_others(idx: list[int]) -> list[int]:
    """Two GPU indices of an 8-GPU node besides the granted ones: where Slurm runs it instead."""
    return sorted(set(range(8)) - set(idx))[:2]


def test_why_a_node_is_unusable() -> None:
    spec = NodeSpec("node1", "V100", list(range(8)), {}, "c")
    assert why_unusable(spec, None) == "not known to Slurm"
    assert why_unusable(spec, _node("IDLE+NOT_RESPONDING")) == "Slurm state IDLE+NOT_RESPONDING"
    assert why_unusable(spec, _node("UNKNOWN")) == "Slurm state UNKNOWN"
    assert why_unusable(spec, _node("IDLE", gpus=6)) == "GPUs [6, 7] not registered with Slurm"
    assert why_unusable(spec, _node("MIXED")) is None


def test_nothing_goes_to_a_node_until_it_registers(env: Env) -> None:
    env.slurm.stop_controller()
    env.slurm.start_controller(register=False)
    env.slurm.register_nodes()
    env.slurm._s.nodes["node1"].registered = False  # the last slurmd still on its way
    jobs = [env.submit("bob", "nlp", 8), env.submit("alice", "cv", 8)]
    env.cycle()
    placed = [env.job(j).placement for j in jobs if env.job(j).placement]
    assert placed and all("node1" not in p for p in placed)
    assert [e.data["node"] for e in env.events(kind="node_bad")] == ["node1"]


def test_a_job_run_on_other_gpus_is_requeued_and_placed_again(env: Env) -> None:
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    granted = env.job(jid).placement
    ((node, idx),) = granted.items()
    other = _two_others(idx)
    env.slurm.misplace(jid, {node: other})
    env.cycle()
    job = env.job(jid)
    assert job.state == "preempted" and job.placement == granted
    (incident,) = env.events(jid, kind="placement_incident")
    assert incident.data == {"granted": granted, "actual": {node: other}, "requeued": True}
    assert ("hbctl", "requeue_hold", (jid,)) in env.slurm.calls
    env.slurm.advance(30)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.placement == granted and env.slurm.job(jid).gpus == granted


def test_a_job_submitted_held_and_released_is_placed_again_after_an_incident(env: Env) -> None:
    # its submit-time hold is recorded by the plugin (user_hold); the controller's requeue-hold is not theirs
    jid = env.submit("alice", "cv", 2, extra=["--hold"])
    env.cycle()
    assert env.job(jid).reason.startswith("held by its owner")
    env.slurm.as_user("alice").release(jid)
    env.cycle()
    env.slurm.advance(30)
    env.cycle()
    env.slurm.advance(30)
    env.cycle()
    granted = env.job(jid).placement
    assert env.job(jid).state == "running"
    ((node, idx),) = granted.items()
    env.slurm.misplace(jid, {node: _two_others(idx)})
    env.cycle()
    assert env.job(jid).state == "preempted"
    env.slurm.advance(30)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.placement == granted, job.reason


@pytest.mark.parametrize(
    ("runs_on", "tries"),
    [
        # GPUs on fewer nodes or fewer GPUs than granted: no race, Slurm's record of the job (seen on the lab)
        ("one of its GPUs", incidents.SHAPE_TRIES),
        # other indices of the same count: a race with a job ending, which repeats under load
        ("other indices", incidents.INDEX_TRIES),
    ],
)
def test_a_job_slurm_keeps_starting_elsewhere_waits_before_it_is_placed_again(
    env: Env, runs_on: str, tries: int
) -> None:
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    granted = env.job(jid).placement
    ((node, idx),) = granted.items()
    elsewhere = {node: idx[:1]} if runs_on == "one of its GPUs" else {node: _two_others(idx)}
    for _ in range(tries - 1):
        env.slurm.misplace(jid, elsewhere)
        env.cycle()
        env.slurm.advance(30)
        env.cycle()
        env.cycle()
        assert env.job(jid).state == "running"  # placed again at once
    env.slurm.misplace(jid, elsewhere)
    env.cycle()
    job = env.job(jid)
    assert job.state == "preempted" and job.reason.startswith(incidents.REPEATED)
    assert f"({tries} times; Slurm runs it on" in job.reason and "places it again after" in job.reason
    requeues = len([c for c in env.slurm.calls if c[1] == "requeue_hold"])
    for _ in range(3):  # it waits, held: not started and requeued again each cycle
        env.slurm.advance(30)
        env.cycle()
    job = env.job(jid)
    assert job.state == "preempted" and job.reason.startswith(incidents.REPEATED)
    assert job.predicted_start == job.placed_at + dt.timedelta(seconds=incidents.RETRY_AFTER_S)  # hq's START
    assert len([c for c in env.slurm.calls if c[1] == "requeue_hold"]) == requeues
    assert env.slurm.job(jid).state == "PENDING" and env.slurm.job(jid).held
    with env.factory() as s:  # its wait is over
        row = s.scalars(select(Job).where(Job.slurm_job_id == jid)).one()
        row.placed_at -= dt.timedelta(seconds=incidents.RETRY_AFTER_S)
        s.commit()
    env.cycle()
    env.slurm.advance(30)
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.placement == granted and env.slurm.job(jid).gpus == granted


def test_while_the_requeue_fails_the_ledger_keeps_the_granted_gpus(env: Env) -> None:
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    env.cycle()
    granted = env.job(jid).placement
    ((node, idx),) = granted.items()
    other = _two_others(idx)
    env.slurm.misplace(jid, {node: other})

    def refuse(job_id: int) -> None:
        from hivebatch.slurm.types import SlurmError

        raise SlurmError(["scontrol", "requeuehold"], 1, "Socket timed out")

    backend = env.ctl
    backend.requeue_hold = refuse  # type: ignore[method-assign]
    env.cycle(backend)
    assert env.job(jid).state == "running" and env.job(jid).placement == granted
    assert "requeue failed, tried again next cycle" in env.events(jid, kind="placement_incident")[0].message
    with env.factory() as s:
        from sqlalchemy import select

        from hivebatch.db.models import GpuBinding

        held = {
            (b.node, b.gpu_index): b.kind
            for b in s.scalars(select(GpuBinding).where(GpuBinding.node == node))
        }
    assert all(held[(node, i)] != "free" for i in idx + other)  # granted and really used: neither handed out
