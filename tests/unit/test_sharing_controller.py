"""GPU slices through the controller cycle on the fake Slurm: binpacked onto one GPU with typed shards,
the GPU given back with the last slice, co-located opportunistic slices requeued for guaranteed ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import CONFIG, Env, make_env

GiB = 1024


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path, CONFIG + "sharing:\n  colocate: {vcs: [sys], headroom_mib: 2G}\n")


def _slice(env: Env, jid: int) -> tuple[str, int, int]:
    job = env.job(jid)
    ((node, gpus),) = job.placement.items()
    kind, gpu, shards = job.gres.split(":")
    assert kind == "shard" and gpus == [int(gpu[1:])]
    return node, int(gpu[1:]), int(shards)


def test_slices_binpack_onto_one_gpu_and_slurm_runs_them_there(env: Env) -> None:
    a = env.submit("alice", "cv", 1, gpu_mem_mib=8 * GiB)
    b = env.submit("alice", "cv", 1, gpu_mem_mib=12 * GiB)
    c = env.submit("alice", "cv", 1, gpu_mem_mib=16 * GiB)
    report = env.cycle()
    assert report.ok and report.placed == 3
    sa, sb, sc = _slice(env, a), _slice(env, b), _slice(env, c)
    assert sa[:2] == sb[:2] and sa[2] == 8 and sb[2] == 12  # 8 + 12 on one GPU
    assert sc[:2] != sa[:2]  # 8 + 12 + 16 > 32: the third opens another GPU
    for jid, (node, gpu, shards) in ((a, sa), (b, sb), (c, sc)):
        sj = env.slurm.job(jid)
        assert sj.state == "RUNNING" and sj.shards == {node: {gpu: shards}}
    env.cycle()
    assert env.job(a).state == env.job(b).state == "running"
    # the next small slice fills the tightest GPU: 32 - 20 = 12 free beats 32 - 16 = 16
    d = env.submit("alice", "cv", 1, gpu_mem_mib=12 * GiB)
    env.cycle()
    assert _slice(env, d)[:2] == sa[:2]


def test_the_gpu_goes_back_to_the_vc_with_its_last_slice(env: Env) -> None:
    a = env.submit("bob", "nlp", 1, gpu_mem_mib=8 * GiB)
    env.cycle()
    env.cycle()
    env.slurm.finish(a)
    env.cycle()
    assert env.job(a).state == "done"
    # nlp's two whole nodes are whole again: a 16-GPU job of nlp is placed at once
    big = env.submit("bob", "nlp", 16)
    assert env.cycle().placed == 1
    assert env.job(big).state == "placed"


def test_colocated_opportunistic_slice_is_requeued_for_a_guaranteed_slice(env: Env) -> None:
    g1 = env.submit("carol", "sys", 1, gpu_mem_mib=8 * GiB)
    env.cycle()
    opp = env.submit("bob", "nlp", 1, qos="opportunistic", gpu_mem_mib=20 * GiB)
    env.cycle()
    assert _slice(env, opp)[:2] == _slice(env, g1)[:2]  # on the idle part of sys's GPU
    env.cycle()
    assert env.job(opp).state == "running"
    g2 = env.submit("carol", "sys", 1, gpu_mem_mib=12 * GiB)
    report = env.cycle()
    assert report.ok and report.preempted == 1
    assert env.job(opp).state == "preempted"
    assert _slice(env, g2)[:2] == _slice(env, g1)[:2]
    assert env.slurm.job(g2).state == "RUNNING"
    assert env.slurm.job(opp).state == "PENDING" and env.slurm.job(opp).held


def test_a_victim_slurm_starts_while_the_cycle_decides_is_requeued_in_that_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    env = make_env(
        tmp_path, CONFIG + "sharing:\n  colocate: {vcs: [sys], headroom_mib: 2G}\n", auto_schedule=False
    )
    g1 = env.submit("carol", "sys", 1, gpu_mem_mib=8 * GiB)
    env.cycle()
    env.slurm.schedule()
    opp = env.submit("bob", "nlp", 1, qos="opportunistic", gpu_mem_mib=20 * GiB)
    env.cycle()
    g2 = env.submit("carol", "sys", 1, gpu_mem_mib=12 * GiB)
    backend = env.ctl
    hold = backend.hold

    def hold_after_slurm_started_it(job_id: int) -> None:
        env.slurm.schedule()  # the released slice starts after the cycle read it pending
        hold(job_id)  # Slurm refuses: tests/fixtures/slurm/err_hold_running_managed.txt

    backend.hold = hold_after_slurm_started_it  # type: ignore[method-assign]
    report = env.cycle(backend)
    assert report.ok and report.preempted == 1, report.failures
    assert env.job(opp).state == "preempted" and env.job(opp).start_time is not None
    node, gpu, _ = _slice(env, opp)
    (event,) = env.events(opp, "preempted")
    assert event.message == f"requeued and held: job {g2} needs its GPUs {node}:[{gpu}]"
    assert env.slurm.job(opp).state == "PENDING" and env.slurm.job(opp).held
    env.slurm.schedule()
    assert env.slurm.job(g2).state == "RUNNING" and _slice(env, g2)[:2] == _slice(env, g1)[:2]


def test_whole_gpu_jobs_never_land_on_a_shared_gpu(env: Env) -> None:
    a = env.submit("alice", "cv", 1, gpu_mem_mib=4 * GiB)
    env.cycle()
    node, gpu, _ = _slice(env, a)
    # cv holds one node cell and one socket cell: the slice took a GPU of the socket, the node stays whole
    whole = env.submit("alice", "cv", 8)
    assert env.cycle().placed == 1
    placement = env.job(whole).placement
    assert gpu not in placement.get(node, [])
    assert env.slurm.job(whole).state == env.slurm.job(a).state == "RUNNING"
    assert env.job(whole).gres.startswith("gpu:")


def test_slices_go_where_their_cpus_fit_and_not_back_to_a_node_slurm_refused(env: Env) -> None:
    # on the lab two -c 16 slices were binpacked onto one GPU of a 16-CPU node, and one waited; a slice
    # Slurm could never run on its node (-x that node) was placed there again every cycle
    a = env.submit("alice", "cv", 1, gpu_mem_mib=8 * GiB, extra=["-c", "16"])
    b = env.submit("alice", "cv", 1, gpu_mem_mib=8 * GiB, extra=["-c", "16"])
    env.cycle()
    assert _slice(env, a)[0] != _slice(env, b)[0]
    c = env.submit("carol", "sys", 1, gpu_mem_mib=4 * GiB)
    env.slurm.never_runnable_on(c, ["node1", "node2", "node3"])
    for _ in range(5):
        env.cycle()
    assert env.job(c).state == "running" and _slice(env, c)[0] == "node4"
    assert len(env.events(c, kind="taken_back")) <= 3


def test_a_slice_whose_cells_lack_cpus_waits_for_them_and_says_when(env: Env) -> None:
    # sys's cells must stay on one node (the others are cv's and nlp's whole nodes), whose 16 CPUs
    # the first -c 16 slice takes: the second waits for it, though sys has free GPUs
    first = env.submit("carol", "sys", 1, gpu_mem_mib=4 * GiB, extra=["-c", "16"])
    env.cycle()
    second = env.submit("carol", "sys", 1, gpu_mem_mib=4 * GiB, extra=["-c", "16"])
    env.cycle()
    job = env.job(second)
    assert job.state == "queued"
    node = _slice(env, first)[0]
    assert f"{node}: 0 CPUs free, the job needs 16" in (job.reason or "")
    assert job.predicted_start == env.job(first).predicted_end
