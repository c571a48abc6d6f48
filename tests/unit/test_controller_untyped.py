"""Untyped pins: a job is pinned as a plain GPU count where Slurm can only grant the chosen GPUs, and
a requeued one resumes on any GPUs Slurm can only pick among those held for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import CONFIG, SCRIPT, Env, make_env

from hivebatch.cells import CellAllocator, GpuUse
from hivebatch.db.models import CellSnapshot

SETTING = "controller: {lock_file: var/ctl.lock, interval_s: 1"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path)


def _gres_sent(env: Env, jid: int) -> list[str]:
    return [c[2][3] for c in env.slurm.calls if c[1] == "update_pending" and c[2][0] == jid]


def _cells_map(env: Env) -> dict[str, dict[int, GpuUse]]:
    """The GPU map of the allocator snapshot the last cycle left."""
    with env.factory() as s:
        snap = s.get(CellSnapshot, 1)
        assert snap is not None
        return CellAllocator.restore(env.ctx.spec, snap.data).gpu_map()


def _node1_with_two_free(env: Env, gres: str = "gpu:2") -> tuple[int, int]:
    """node1: a 6-GPU job on GPUs 2-7 and a 2-GPU job on GPUs 0 and 1 (the only ones free), pinned
    with ``gres``."""
    first = env.submit("carol", "sys", 2, qos="opportunistic")
    env.cycle()
    wide = env.submit("carol", "sys", 6, qos="opportunistic")
    env.cycle()
    env.slurm.finish(first)
    env.cycle()
    small = env.submit("carol", "sys", 2, qos="opportunistic")
    env.cycle()
    env.cycle()
    assert env.job(wide).placement == {"node1": [2, 3, 4, 5, 6, 7]}
    assert (env.job(small).placement, env.job(small).gres) == ({"node1": [0, 1]}, gres)
    return wide, small


def test_a_job_taking_every_gpu_slurm_sees_free_is_pinned_as_a_count(env: Env) -> None:
    whole = env.submit("bob", "nlp", 8)
    env.cycle()
    part = env.submit("alice", "cv", 2)
    env.cycle()
    assert _gres_sent(env, whole) == ["gpu:8"]
    assert env.slurm.job(whole).state == "RUNNING" and env.slurm.job(whole).gpus == env.job(whole).placement
    # six GPUs free on its node: Slurm would choose among them, so the chosen ones are typed
    (node,) = env.job(part).placement
    assert _gres_sent(env, part) == [",".join(f"gpu:g{i}:1" for i in env.job(part).placement[node])]


def test_a_requeued_untyped_job_resumes_on_other_indices_of_another_node(env: Env) -> None:
    _wide, small = _node1_with_two_free(env)
    four = env.submit("carol", "sys", 4, qos="opportunistic")
    env.cycle()
    two = env.submit("carol", "sys", 2, qos="opportunistic")
    env.cycle()
    (node,) = env.job(four).placement
    left = sorted(set(range(8)) - set(env.job(four).placement[node]) - set(env.job(two).placement[node]))
    assert len(left) == 2 and left != [0, 1]
    env.slurm.requeue(small)  # as a node failure or an admin's `scontrol requeue` would
    # an Operator's job (passed by the plugin untouched) takes the two GPUs it had
    env.ctl.submit(SCRIPT, ["-A", "sys", "-w", "node1", "--gres=gpu:2"])
    env.cycle()
    env.cycle()
    job = env.job(small)
    assert job.state == "placed", job.reason
    assert job.placement == {node: left} and job.gres == "gpu:2"
    env.slurm.advance(15)  # Slurm starts a requeued job again only after its credential expired
    env.slurm.schedule()
    env.cycle()
    assert env.slurm.job(small).gpus == {node: left}
    assert env.job(small).state == "running" and not env.events(small, "placement_incident")


def test_with_the_setting_off_it_is_typed_and_resumes_only_on_its_own_indices(tmp_path: Path) -> None:
    env = make_env(tmp_path, CONFIG.replace(SETTING, SETTING + ", untyped_gres: false"))
    wide, small = _node1_with_two_free(env, gres="gpu:g0:1,gpu:g1:1")
    assert env.job(wide).gres.startswith("gpu:g")
    env.submit("carol", "sys", 6, qos="opportunistic")
    env.cycle()
    env.slurm.requeue(small)
    env.ctl.submit(SCRIPT, ["-A", "sys", "-w", "node1", "--gres=gpu:2"])
    env.cycle()
    env.cycle()
    job = env.job(small)
    assert job.gres == "gpu:g0:1,gpu:g1:1" and list(job.placement.values()) == [[0, 1]]
    assert "node1" not in job.placement


def test_with_more_gpus_free_it_holds_them_all_until_slurm_picks(env: Env) -> None:
    wide, small = _node1_with_two_free(env)
    env.slurm.requeue(small)
    env.slurm.finish(wide)
    env.cycle()
    env.cycle()
    job = env.job(small)
    assert job.state == "placed", job.reason
    (node,) = job.placement
    assert len(job.placement[node]) == 8  # Slurm may pick any of them: all are held for it
    assert job.reason == "holds the GPUs free on its node(s) until Slurm has picked 2 per node among them"
    assert sum(1 for u in _cells_map(env)[node].values() if u.job == str(small)) == 8
    env.slurm.advance(15)
    env.slurm.schedule()
    env.cycle()
    job = env.job(small)
    granted = env.slurm.job(small).gpus
    assert job.state == "running" and job.placement == granted and len(granted[node]) == 2
    assert not env.events(small, "placement_incident") and not env.events(small, "placement_mismatch")
    # the rest went back: another 6-GPU job of the VC fits on that node now
    other = env.submit("carol", "sys", 6, qos="opportunistic")
    env.cycle()
    assert list(env.job(other).placement) == [node]


def test_slurm_picking_outside_what_was_held_is_an_incident(env: Env) -> None:
    wide, small = _node1_with_two_free(env)
    env.slurm.requeue(small)
    env.cycle()
    env.cycle()
    job = env.job(small)
    assert job.state == "placed" and job.placement == {"node1": [0, 1]}
    # the wide job ends that second, so Slurm had eight GPUs to pick from and took GPU 5 as well
    env.slurm.finish(wide)
    env.slurm.advance(15)
    env.slurm.misplace(small, {"node1": [0, 5]})
    env.cycle()
    job = env.job(small)
    assert env.events(small, "placement_incident")
    assert job.state == "preempted" and "no other GPUs to pick" in job.reason
    assert env.slurm.job(small).state == "PENDING" and env.slurm.job(small).held


def test_an_admin_changing_an_untyped_count_stops_the_job_from_being_placed(env: Env) -> None:
    _wide, small = _node1_with_two_free(env)
    env.slurm.requeue(small)
    env.ctl.update_pending(small, gres="gpu:3")
    env.cycle()
    env.cycle()
    job = env.job(small)
    assert job.state == "rejected" and "asks Slurm for GPUs itself (gres:gpu:3)" in job.reason


def test_the_setting_is_checked(tmp_path: Path) -> None:
    from hivebatch.errors import ConfigError

    with pytest.raises(ConfigError, match="controller.untyped_gres must be true or false"):
        make_env(tmp_path, CONFIG.replace(SETTING, SETTING + ", untyped_gres: maybe"))


def test_a_one_gpu_job_beside_its_free_pair_holds_the_pair_until_slurm_picks(tmp_path: Path) -> None:
    env = make_env(tmp_path, auto_schedule=False)
    wide = env.submit("carol", "sys", 6, qos="opportunistic")
    env.cycle()
    env.slurm.schedule()
    env.cycle()
    (node,) = env.job(wide).placement
    pair = sorted(set(range(8)) - set(env.job(wide).placement[node]))
    one = env.submit("carol", "sys", 1, qos="opportunistic")
    env.cycle()
    job = env.job(one)
    assert (job.gres, job.placement) == ("gpu:1", {node: pair}) and "holds the GPUs" in job.reason
    env.slurm.schedule()  # Slurm picks one of the two
    env.cycle()
    job = env.job(one)
    picked = env.slurm.job(one).gpus
    assert job.state == "running" and job.placement == picked and len(picked[node]) == 1
    assert not env.events(one, "placement_incident") and job.reason is None
    # the other GPU of the pair went back: the next one-GPU job takes exactly it, untyped as well
    last = env.submit("carol", "sys", 1, qos="opportunistic")
    env.cycle()
    assert env.job(last).placement == {node: sorted(set(pair) - set(picked[node]))}
    assert env.job(last).gres == "gpu:1"


def test_an_exclusive_job_is_pinned_typed_even_when_it_takes_every_gpu_free(env: Env) -> None:
    # Slurm splits an exclusive job's GRES into one record per index: a count would fail its every srun
    # (tests/fixtures/slurm/exclusive_step_gres.txt)
    whole = env.submit("bob", "nlp", 8, extra=["--exclusive"])
    env.cycle()
    (node,) = env.job(whole).placement
    assert env.job(whole).placement[node] == list(range(8))
    assert _gres_sent(env, whole) == [",".join(f"gpu:g{i}:1" for i in range(8))]
    assert env.slurm.job(whole).state == "RUNNING"
