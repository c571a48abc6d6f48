"""A pin Slurm's scheduler holds because it can never run the job there (BadConstraints, priority 0:
tests/fixtures/slurm/bad_constraints_held.txt) is placed on other nodes, not again and again where it
was."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import Env, make_env


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def test_the_pin_is_taken_back_and_its_node_avoided(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    env.slurm.never_runnable_on(jid, ["node1", "node2", "node3"])  # as -N 1 -n 32 -O did on the lab
    for _ in range(5):
        env.cycle()
    job = env.job(jid)
    assert job.state == "running" and list(job.placement or {}) == ["node4"]
    taken = env.events(jid, kind="taken_back")
    assert 1 <= len(taken) <= 3  # once per node Slurm held it on, never twice on one
    pinned = [next(iter((e.data or {})["placement"])) for e in taken]
    assert len(set(pinned)) == len(pinned) and "node4" not in pinned
    assert "Slurm found it can never run as asked on" in taken[0].message
    assert "(Slurm's reason: BadConstraints); placed again on other nodes" in taken[0].message


def test_a_job_slurm_can_run_nowhere_waits_without_being_placed_each_cycle(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    env.slurm.never_runnable_on(jid, ["node1", "node2", "node3", "node4"])
    for _ in range(10):
        env.cycle()
    job = env.job(jid)
    assert job.state == "queued"
    assert len(env.events(jid, kind="placed")) == 4  # each node tried once within the hour
    assert "Slurm did not start the job there before" in (job.reason or "")
