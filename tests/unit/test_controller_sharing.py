"""GPU slices through the controller against the fake Slurm: binpacked placement with typed shards,
co-location and preemption of opportunistic slices, the ledger rebuilt each cycle, slice GPU-hours."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from controller_support import CONFIG, Env, make_env
from sqlalchemy import select

from hivebatch.db import GpuBinding, GpuUsage
from hivebatch.state.shares import get_state

GiB = 1024
SHARING = """
sharing:
  enabled: true
  colocate: {vcs: [sys], headroom_mib: 2G, max_jobs_per_gpu: 4}
"""


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path, CONFIG + SHARING)


def _slice(env: Env, user: str, vc: str, gib: float, qos: str = "normal") -> int:
    jid = env.submit(user, vc, 1, qos=qos, gpu_mem_mib=int(gib * GiB))
    env.cycle()
    return jid


def _where(env: Env, jid: int) -> tuple[str, int, int]:
    """(node, GPU index, shards) Slurm really runs the job with."""
    sj = env.slurm.job(jid)
    assert sj.state == "RUNNING" and not sj.gpus, f"job {jid} is {sj.state} with whole GPUs {sj.gpus}"
    ((node, per_gpu),) = sj.shards.items()
    ((gpu, shards),) = per_gpu.items()
    return node, gpu, shards


def test_a_slice_is_pinned_with_a_typed_shard_gres_on_one_gpu(env: Env) -> None:
    jid = _slice(env, "alice", "cv", 8)
    job = env.job(jid)
    node, gpu, shards = _where(env, jid)
    assert (job.gres, job.placement, shards) == (f"shard:g{gpu}:8", {node: [gpu]}, 8)
    updates = [c for c in env.slurm.calls if c[1] == "update_pending"]
    assert updates == [("hbctl", "update_pending", (jid, [node], 1, f"shard:g{gpu}:8"))]
    assert job.gpus == 1 and job.state == "placed"


def test_binpack_takes_the_gpu_with_least_memory_left_that_fits(env: Env) -> None:
    # four shared GPUs of VC cv with 12G, 8G, 4G and 16G free (the seed's 12207/8138/4069/16276 MiB)
    a = _slice(env, "alice", "cv", 20)
    b = _slice(env, "alice", "cv", 24)
    c = _slice(env, "alice", "cv", 28)
    d = _slice(env, "alice", "cv", 16)
    gpus = [_where(env, j)[:2] for j in (a, b, c, d)]
    assert len(set(gpus)) == 4  # none fitted on an earlier GPU: each bound a fresh one
    new = _slice(env, "alice", "cv", 8138 / GiB)  # 8138 MiB: 8 shards
    assert _where(env, new) == (*gpus[1], 8)  # the GPU with 8G left, not 12G or 16G
    state = get_state_now(env)
    used = {(g["node"], g["gpu"]): sum(s["mem_mib"] for s in g["slices"]) for g in state["gpus"]}
    assert used[gpus[1]] == 32 * GiB


def get_state_now(env: Env) -> dict:
    with env.factory() as s:
        return get_state(s, "sharing")


def test_two_slices_binpack_onto_one_gpu_and_later_cycles_change_nothing(env: Env) -> None:
    first = _slice(env, "carol", "sys", 8)
    second = _slice(env, "carol", "sys", 8)
    assert _where(env, first)[:2] == _where(env, second)[:2]
    env.cycle()  # running now; the ledger is rebuilt from the jobs and agrees with Slurm
    calls, events = len(env.slurm.calls), len(env.events())
    env.cycle()
    assert len(env.slurm.calls) == calls and len(env.events()) == events
    node, gpu, _ = _where(env, first)
    with env.factory() as s:
        row = s.scalars(select(GpuBinding).where(GpuBinding.node == node, GpuBinding.gpu_index == gpu)).one()
        assert (row.kind, row.vc_name) == ("guaranteed", "sys")  # shared GPU of sys, not foreign
    assert not env.events(kind="foreign") and not env.events(kind="adopt_failed")
    assert env.job(first).state == env.job(second).state == "running"


def test_whole_gpu_jobs_never_get_a_gpu_a_slice_uses(env: Env) -> None:
    part = _slice(env, "carol", "sys", 4)
    node, gpu, _ = _where(env, part)
    wholes = [env.submit("carol", "sys", 1) for _ in range(4)]
    env.cycle()
    placed = [env.job(j).placement for j in wholes]
    assert sum(1 for p in placed if p) == 3  # sys holds 4 GPUs; the slice's GPU is one of them
    assert all(gpu not in p.get(node, []) for p in placed if p)


def test_guaranteed_slice_preempts_a_colocated_opportunistic_slice_first(env: Env) -> None:
    owner = _slice(env, "carol", "sys", 8)
    node, gpu, _ = _where(env, owner)
    guest = _slice(env, "alice", "cv", 16, qos="opportunistic")
    assert _where(env, guest)[:2] == (node, gpu)  # co-located on the idle part of sys's GPU
    env.cycle()
    mark = len(env.slurm.calls)
    more = _slice(env, "carol", "sys", 16)  # 8G free: the guest must go
    assert _where(env, more)[:2] == (node, gpu)
    calls = [(c[1], c[2][0]) for c in env.slurm.calls[mark:]]
    assert calls.index(("requeue_hold", guest)) < calls.index(("release", more))
    job = env.job(guest)
    assert job.state == "preempted" and job.preemptions == 1
    assert env.slurm.job(guest).held and env.slurm.job(guest).state == "PENDING"


def test_slice_gpu_hours_are_its_share_of_the_gpu(env: Env) -> None:
    jid = _slice(env, "carol", "sys", 8)
    env.cycle()
    env.slurm.advance(3600)
    env.slurm.finish(jid)
    env.cycle()
    job = env.job(jid)
    assert job.state == "done" and job.gpu_hours_guaranteed == pytest.approx(0.25, rel=0.02)
    with env.factory() as s:
        usage = s.scalars(select(GpuUsage)).all()
        assert sum(u.guaranteed_s for u in usage) == pytest.approx(0.25 * 3600, rel=0.02)


def test_the_shared_gpu_is_given_back_when_its_last_slice_ends(env: Env) -> None:
    jid = _slice(env, "carol", "sys", 8)
    env.cycle()
    env.slurm.finish(jid)
    env.cycle()
    assert get_state_now(env)["gpus"] == []
    wholes = [env.submit("carol", "sys", 1) for _ in range(4)]
    env.cycle()
    assert [env.job(j).state for j in wholes] == ["placed"] * 4  # all 4 of sys's GPUs are free again


def test_quota_report_counts_slices_by_share_and_shows_colocated_gpu_hours(env: Env) -> None:
    from hivebatch.cli.hadmin.report import _compute
    from hivebatch.reports.render import quota_notes

    owner = _slice(env, "carol", "sys", 8)
    guest = _slice(env, "alice", "cv", 16, qos="opportunistic")
    assert _where(env, guest)[:2] == _where(env, owner)[:2]
    env.cycle()
    env.slurm.advance(3600)
    env.slurm.finish(guest)
    env.slurm.finish(owner)
    env.cycle()
    assert env.job(guest).gpu_hours_opportunistic == pytest.approx(0.5, rel=0.02)
    start = env.job(owner).start_time
    assert start is not None
    since = (start - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    until = (start + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    _data, quota, _users = _compute(str(env.ctx.config_path), since, until, None)
    sys_vc = next(v for v in quota.vcs if v.name == "sys")
    assert sys_vc.gpu_hours_guaranteed == pytest.approx(0.25, rel=0.05)  # 8G of 32G for an hour
    assert quota.totals.gpu_hours_opportunistic == pytest.approx(0.5, rel=0.05)
    assert quota.totals.gpu_hours_colocated == pytest.approx(0.5, rel=0.05)
    assert any(n.startswith("Co-located: 0.5 GPU-h") for n in quota_notes(quota))


def test_a_whole_gpu_job_of_the_vc_preempts_an_opportunistic_slice_on_its_cells(env: Env) -> None:
    guest = _slice(env, "alice", "cv", 4, qos="opportunistic")
    node, gpu, _ = _where(env, guest)
    # every VC asks for all of its GPUs: the one whose cells hold the slice's GPU needs it back
    wholes = [
        env.submit(user, vc, n)
        for user, vc, n in [("alice", "cv", 8), ("alice", "cv", 4), ("bob", "nlp", 8), ("bob", "nlp", 8)]
    ] + [env.submit("carol", "sys", n) for n in (2, 1, 1)]
    env.cycle()
    assert all(env.job(j).state == "placed" for j in wholes), [(j, env.job(j).reason) for j in wholes]
    taker = next(j for j in wholes if gpu in (env.job(j).placement or {}).get(node, []))
    victim = env.job(guest)
    assert victim.state == "preempted" and f"preempted by job {taker}" in (victim.reason or "")
    assert env.slurm.job(guest).held
    assert get_state_now(env)["gpus"] == []


def test_running_slices_are_adopted_as_slices_when_the_ledger_is_lost(env: Env, tmp_path: Path) -> None:
    a = _slice(env, "carol", "sys", 8)
    b = _slice(env, "carol", "sys", 8)
    env.cycle()
    node, gpu, _ = _where(env, a)
    (tmp_path / "fresh").mkdir()
    fresh = make_env(tmp_path / "fresh", CONFIG + SHARING)  # a new, empty ledger over the same Slurm
    fresh.slurm = env.slurm
    fresh.cycle()
    for jid in (a, b):
        job = fresh.job(jid)
        assert (job.state, job.placement, job.gres) == ("running", {node: [gpu]}, f"shard:g{gpu}:8")
    assert not fresh.events(kind="foreign") and not fresh.events(kind="adopt_failed")
    slices = {s["job_id"] for g in get_state_now(fresh)["gpus"] for s in g["slices"]}
    assert slices == {str(a), str(b)}
    # the GPU still has 16G for sys: a third slice binpacks there rather than opening another GPU
    c = _slice(fresh, "carol", "sys", 16)
    assert _where(fresh, c)[:2] == (node, gpu)


def test_a_bad_sharing_section_stops_the_controller_in_one_line(tmp_path: Path) -> None:
    from hivebatch.controller.context import load_context
    from hivebatch.errors import ConfigError

    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text(CONFIG + "sharing:\n  colocate: {vcs: [vision]}\n")
    with pytest.raises(ConfigError, match="vision") as info:
        load_context(cfg)
    assert "\n" not in str(info.value)


def test_a_placed_slice_gets_the_predictions_of_a_one_gpu_job(env: Env) -> None:
    part = env.submit("carol", "sys", 1, gpu_mem_mib=8 * GiB, time_limit_s=1800)
    whole = env.submit("carol", "sys", 1, time_limit_s=1800)
    env.cycle()
    s, w = env.job(part), env.job(whole)
    assert s.gres.startswith("shard:") and w.gres.startswith("gpu:")
    assert s.latency_s == w.latency_s == 1800  # a plain job's duration is its time limit
    assert s.predicted_start == w.predicted_start and s.predicted_start is not None
    assert s.predicted_end == s.predicted_start + dt.timedelta(seconds=1800)
    assert s.expected_completion is not None and s.slack_s is not None
    assert abs((s.expected_completion - w.expected_completion).total_seconds()) < 2
    assert s.slack_s == pytest.approx(w.slack_s, abs=2)
    assert s.expected_completion == s.predicted_end + dt.timedelta(seconds=s.slack_s)


def test_a_waiting_slice_gets_ect_slack_and_a_predicted_start(env: Env) -> None:
    wholes = [env.submit("carol", "sys", 1, time_limit_s=600) for _ in range(4)]  # all of sys's GPUs
    env.cycle()
    ends = [env.job(j).predicted_end for j in wholes]
    assert all(e is not None for e in ends)
    part = env.submit("carol", "sys", 1, gpu_mem_mib=8 * GiB, time_limit_s=1200)
    env.cycle()
    job = env.job(part)
    assert job.state == "queued" and job.latency_s == 1200
    assert job.predicted_start == min(ends)  # the first of sys's GPUs to free up
    assert job.predicted_end == job.predicted_start + dt.timedelta(seconds=1200)
    assert job.expected_completion is not None and job.slack_s is not None
    assert job.expected_completion == job.submit_time + dt.timedelta(seconds=2 * 1200)  # normal: c = 2


MIXED = """
sharing:
  enabled: true
  allow_mixed_nodes: [node1, node2, node3, node4]
  colocate: {vcs: [sys], headroom_mib: 2G, max_jobs_per_gpu: 4}
"""


@pytest.fixture()
def mixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path, CONFIG + MIXED)


def _shard_nodes(env: Env, jid: int) -> dict[str, dict[int, int]]:
    sj = env.slurm.job(jid)
    assert sj.state == "RUNNING" and not sj.gpus, f"job {jid} is {sj.state} with whole GPUs {sj.gpus}"
    return sj.shards


def test_a_one_gpu_per_node_job_with_gpu_mem_holds_shards_and_leaves_the_rest_to_slices(mixed: Env) -> None:
    whole = mixed.submit("bob", "nlp", 2, nodes=2, gpu_mem_mib=8 * GiB)
    mixed.cycle()
    job = mixed.job(whole)
    assert job.state == "placed" and len(job.placement) == 2, job.reason
    ((gpu,),) = {tuple(v) for v in job.placement.values()}
    assert job.gres == f"shard:g{gpu}:8" and job.gpus == 2
    assert _shard_nodes(mixed, whole) == {n: {gpu: 8} for n in job.placement}
    mixed.cycle()
    part = _slice(mixed, "bob", "nlp", 20)
    node, sgpu, shards = _where(mixed, part)
    assert node in job.placement and sgpu == gpu and shards == 20  # on the 24G the whole job leaves
    mixed.cycle()
    calls, events = len(mixed.slurm.calls), len(mixed.events())
    mixed.cycle()  # the ledger rebuilt from the jobs agrees with Slurm: nothing to do
    assert len(mixed.slurm.calls) == calls and len(mixed.events()) == events
    assert not mixed.events(kind="foreign") and not mixed.events(kind="adopt_failed")
    state = get_state_now(mixed)
    whole_gpus = {(g["node"], g["gpu"]): g for g in state["gpus"] if g["kind"] == "whole"}
    assert set(whole_gpus) == {(n, gpu) for n in job.placement}
    assert whole_gpus[(node, gpu)]["reserve_mib"] == 8 * GiB
    assert [s["job_id"] for s in whole_gpus[(node, gpu)]["slices"]] == [str(part)]
    # a further 8G slice no longer fits that GPU (8 + 20 + 8 > 32): it goes to the other node's
    other = _slice(mixed, "bob", "nlp", 8)
    assert _where(mixed, other)[:2] == (next(n for n in job.placement if n != node), gpu)


def test_a_whole_job_holding_shards_counts_whole_gpus(mixed: Env) -> None:
    whole = mixed.submit("bob", "nlp", 2, nodes=2, gpu_mem_mib=8 * GiB)
    mixed.cycle()
    mixed.cycle()
    mixed.slurm.advance(3600)
    mixed.slurm.finish(whole)
    mixed.cycle()
    job = mixed.job(whole)
    assert job.state == "done" and job.gres.startswith("shard:")
    assert job.gpu_hours_guaranteed == pytest.approx(2.0, rel=0.02)


def test_whole_gpus_stay_whole_where_no_sharing_rule_covers_them(env: Env) -> None:
    plain = env.submit("bob", "nlp", 2, nodes=2, gpu_mem_mib=8 * GiB)  # no allow_mixed_nodes/colocate for nlp
    env.cycle()
    job = env.job(plain)
    assert job.state == "placed" and job.gres.startswith("gpu:"), job.gres
    assert get_state_now(env)["gpus"] == []


def test_whole_gpus_stay_whole_with_two_gpus_per_node_or_when_opportunistic(mixed: Env) -> None:
    wide = mixed.submit(
        "bob", "nlp", 4, nodes=2, gpu_mem_mib=8 * GiB
    )  # 2 GPUs per node: Slurm cannot shard it
    opp = mixed.submit("bob", "nlp", 2, nodes=2, qos="opportunistic", gpu_mem_mib=8 * GiB)
    mixed.cycle()
    assert mixed.job(wide).gres.count("gpu:") == 2 and mixed.job(wide).state == "placed"
    assert mixed.job(opp).gres is None or mixed.job(opp).gres.startswith("gpu:")
    assert all(g["kind"] != "whole" for g in get_state_now(mixed)["gpus"])


def test_a_lost_ledger_adopts_a_shard_holding_whole_job_as_whole_and_its_slices_on_top(
    mixed: Env, tmp_path: Path
) -> None:
    whole = mixed.submit("bob", "nlp", 2, nodes=2, gpu_mem_mib=8 * GiB)
    mixed.cycle()
    mixed.cycle()
    part = _slice(mixed, "bob", "nlp", 20)
    mixed.cycle()
    placement = mixed.job(whole).placement
    (tmp_path / "fresh").mkdir()
    fresh = make_env(tmp_path / "fresh", CONFIG + MIXED)
    fresh.slurm = mixed.slurm
    fresh.cycle()
    w, s = fresh.job(whole), fresh.job(part)
    assert (w.state, w.placement, w.gres) == ("running", placement, mixed.job(whole).gres)
    assert (s.state, s.gres) == ("running", mixed.job(part).gres)
    assert not fresh.events(kind="foreign") and not fresh.events(kind="adopt_failed")
    kinds = {(g["node"], g["gpu"]): g["kind"] for g in get_state_now(fresh)["gpus"]}
    assert set(kinds.values()) == {"whole"} and len(kinds) == 2
    with fresh.factory() as sess:
        rows = sess.scalars(select(GpuBinding).where(GpuBinding.slurm_job_id == whole)).all()
        assert {(r.node, r.gpu_index) for r in rows} == set(kinds) and {r.kind for r in rows} == {
            "guaranteed"
        }


def test_preempting_a_shard_holding_whole_job_requeues_the_slices_on_its_taken_gpu(mixed: Env) -> None:
    whole = mixed.submit("bob", "nlp", 2, nodes=2, gpu_mem_mib=8 * GiB)
    mixed.cycle()
    placement = mixed.job(whole).placement
    ((gpu,),) = {tuple(v) for v in placement.values()}
    parts = [_slice(mixed, "bob", "nlp", 20) for _ in range(2)]  # one on each of its GPUs
    on = {p: _where(mixed, p)[:2] for p in parts}
    assert set(on.values()) == {(n, gpu) for n in placement}
    fill = [mixed.submit("bob", "nlp", 7, nodes=1) for _ in range(2)]  # the rest of nlp's 16 GPUs
    mixed.cycle()
    assert all(mixed.job(j).state == "placed" for j in fill)
    mixed.cycle()
    urgent = mixed.submit("bob", "nlp", 8, nodes=1, qos="prior")
    mixed.cycle()
    taker = mixed.job(urgent)
    assert taker.state == "placed", taker.reason
    ((taken,),) = [list(taker.placement)]
    w = mixed.job(whole)
    assert w.state == "preempted" and f"preempted by job {urgent}" in (w.reason or "")
    for p in parts:
        if on[p][0] == taken:
            assert mixed.job(p).state == "preempted" and mixed.slurm.job(p).held
        else:  # its GPU is free again in the cells: the slice keeps it as a shared GPU of nlp
            assert mixed.job(p).state in ("placed", "running") and _where(mixed, p)[:2] == on[p]
    assert sum(on[p][0] == taken for p in parts) == 1
    mixed.cycle()
    assert mixed.slurm.job(urgent).state == "RUNNING"
    assert not mixed.events(kind="adopt_failed") and not mixed.events(kind="foreign")
    # once the GPUs are free again it resumes on the same index, still as shards (Slurm keeps the gres)
    # (the surviving slice holds the other node's GPU as a shared cell until it ends)
    gres = w.gres
    mixed.slurm.finish(urgent)
    for p in parts:
        if on[p][0] != taken:
            mixed.slurm.finish(p)
    mixed.cycle()
    back = mixed.job(whole)
    assert back.state == "placed" and back.gres == gres and len(back.placement) == 2, back.reason
    mixed.slurm.advance(30)  # a requeued job may start again after its BeginTime, as in Slurm
    mixed.cycle()
    assert _shard_nodes(mixed, whole) == {n: {gpu: 8} for n in back.placement}
    assert {(g["node"], g["gpu"]) for g in get_state_now(mixed)["gpus"] if g["kind"] == "whole"} == {
        (n, gpu) for n in back.placement
    }
