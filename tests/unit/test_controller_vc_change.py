"""An admin changes the virtual clusters while jobs run and wait: the controller goes on with the new cells."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from controller_support import CONFIG, Env, make_env
from sqlalchemy import select

from hivebatch.controller.context import load_context
from hivebatch.db import VirtualCluster
from hivebatch.reports.source import load_events

OLD_CV = "cv: {cells: {V100-NODE: 1, V100-SOCKET: 1}}"
OLD_SYS = "sys: {cells: {V100-SWITCH: 1, V100: 2}}"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path)


def _reconfigure(env: Env, tmp_path: Path, config: str) -> Env:
    """The admin's edit, read by the next controller run (the timer starts a fresh one each time)."""
    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text(config)
    return replace(env, ctx=load_context(cfg))


def _cells(env: Env) -> dict[str, dict[str, int]]:
    with env.factory() as s:
        return {v.name: {c.cell_type: c.count for c in v.cells} for v in s.scalars(select(VirtualCluster))}


def _running(env: Env) -> tuple[int, int, list[int], int]:
    """cv's 8- and 4-GPU jobs, sys's two 2-GPU jobs (the second waits for the VC's one switch), nlp's 16."""
    cv8, cv4 = env.submit("alice", "cv", 8), env.submit("alice", "cv", 4)
    sys2 = [env.submit("carol", "sys", 2) for _ in range(2)]
    nlp = env.submit("bob", "nlp", 16)
    env.cycle()
    env.slurm.schedule()
    env.cycle()
    assert [env.job(j).state for j in (cv8, cv4, sys2[0], nlp)] == ["running"] * 4
    assert env.job(sys2[1]).state == "queued"
    return cv8, cv4, sys2, nlp


def test_cells_moved_between_vcs_mirror_and_bind_at_once(env: Env, tmp_path: Path) -> None:
    cv8, cv4, sys2, _nlp = _running(env)
    # cv's socket goes to sys: cv keeps its node, sys now holds a socket beside its switch and GPUs
    moved = CONFIG.replace(OLD_CV, "cv: {cells: {V100-NODE: 1}}").replace(
        OLD_SYS, "sys: {cells: {V100-SOCKET: 1, V100-SWITCH: 1, V100: 2}}"
    )
    env = _reconfigure(env, tmp_path, moved)
    report = env.cycle()
    assert not report.failures
    assert _cells(env)["cv"] == {"V100-NODE": 1}
    assert _cells(env)["sys"] == {"V100": 2, "V100-SOCKET": 1, "V100-SWITCH": 1}
    # the audit trail says when and how (the first mirror, at the controller's start, says nothing)
    assert [e.message for e in env.events(kind="vc_changed")] == [
        "VC cv's cells changed: 1×V100-NODE, 1×V100-SOCKET (12 GPUs) -> 1×V100-NODE (8 GPUs)",
        "VC sys's cells changed: 2×V100, 1×V100-SWITCH (4 GPUs) -> 2×V100, 1×V100-SOCKET, 1×V100-SWITCH (8 GPUs)",
    ]
    with env.factory() as s:  # hadmin events shows the VC of each
        assert [e.vc for e in load_events(s, kinds=["vc_changed"])] == ["cv", "sys"]
    # cv's 4-GPU job no longer fits cv's cells: it ran on as opportunistic work, and sys's waiting job,
    # which the new socket can hold, took its GPUs at once
    beyond = env.events(cv4, "beyond_cells")
    assert len(beyond) == 1 and "holds GPUs beyond VC cv's cells" in beyond[0].message
    assert env.events(cv8, "beyond_cells") == []
    assert env.job(cv4).state == "preempted" and env.job(cv4).preemptions == 1
    assert env.job(sys2[1]).state in ("placed", "running")
    assert set(env.job(sys2[1]).placement or {}) == set(env.events(cv4, "beyond_cells")[0].data["placement"])
    # the requeued job waits for cv's cells, which its 8-GPU job fills
    env.slurm.schedule()
    env.cycle()
    assert env.job(cv4).state == "preempted" and env.job(cv8).state == "running"
    env.slurm.finish(cv8)
    env.cycle()
    env.slurm.advance(15)
    env.slurm.schedule()
    env.cycle()
    assert env.job(cv4).state == "running"


def test_a_count_change_of_a_cell_type_a_vc_keeps(env: Env, tmp_path: Path) -> None:
    env.submit("carol", "sys", 1)
    env.cycle()
    env = _reconfigure(env, tmp_path, CONFIG.replace(OLD_SYS, "sys: {cells: {V100-SWITCH: 1, V100: 1}}"))
    assert not env.cycle().failures
    assert _cells(env)["sys"] == {"V100": 1, "V100-SWITCH": 1}


def test_a_removed_vc(env: Env, tmp_path: Path) -> None:
    _cv8, _cv4, sys2, _nlp = _running(env)
    env = _reconfigure(env, tmp_path, CONFIG.replace(OLD_SYS, ""))
    assert not env.cycle().failures
    assert "sys" not in _cells(env)
    assert [e.message for e in env.events(kind="vc_removed")] == [
        "VC sys removed from the config: it held 2×V100, 1×V100-SWITCH (4 GPUs)"
    ]
    # its running job runs on where it is, as opportunistic work
    running = env.job(sys2[0])
    assert running.state == "running"
    assert running.reason == (
        "holds GPUs of VC sys, which the config no longer has: it keeps them as opportunistic work, "
        f"preempted when a VC needs them; to start again it must be moved to a VC (scontrol update job {sys2[0]} Account=VC)"
    )
    assert [e.kind for e in env.events(sys2[0]) if e.kind == "beyond_cells"] == ["beyond_cells"]
    # its waiting job says what its owner can do
    waiting = env.job(sys2[1])
    assert waiting.state == "rejected"
    assert waiting.reason == (
        "unknown VC 'sys': the config has cv, nlp; move it to one of them "
        f"(scontrol update job {sys2[1]} Account=VC) or cancel it"
    )
    # and brought back
    env = _reconfigure(env, tmp_path, CONFIG)
    env.slurm.finish(sys2[0])
    env.cycle()
    assert [e.message for e in env.events(kind="vc_added")] == [
        "VC sys added: 2×V100, 1×V100-SWITCH (4 GPUs)"
    ]
    assert env.events(kind="vc_changed") == []


def test_a_removed_vcs_running_job_leaves_when_the_vc_given_its_cells_needs_them(
    env: Env, tmp_path: Path
) -> None:
    _cv8, _cv4, sys2, _nlp = _running(env)
    # sys's cells go to cv; sys's running job keeps its GPUs as opportunistic work until cv needs them
    merged = CONFIG.replace(OLD_SYS, "").replace(
        OLD_CV, "cv: {cells: {V100-NODE: 1, V100-SOCKET: 1, V100-SWITCH: 1, V100: 2}}"
    )
    env = _reconfigure(env, tmp_path, merged)
    assert not env.cycle().failures
    assert env.job(sys2[0]).state == "running"
    cv = [env.submit("alice", "cv", 2), env.submit("alice", "cv", 1), env.submit("alice", "cv", 1)]
    env.cycle()
    env.slurm.schedule()
    env.cycle()
    left = env.job(sys2[0])
    assert left.preemptions == 1
    assert [env.job(j).state for j in cv] == ["running"] * 3
    taken = {(n, i) for j in cv for n, idx in (env.job(j).placement or {}).items() for i in idx}
    assert {(n, i) for n, idx in (left.placement or {}).items() for i in idx} <= taken
    # requeued, it waits for its owner to move it
    assert env.slurm.job(sys2[0]).state == "PENDING" and left.state == "rejected"
    assert left.reason == (
        "unknown VC 'sys': the config has cv, nlp; move it to one of them "
        f"(scontrol update job {sys2[0]} Account=VC) or cancel it"
    )


def test_a_controller_loop_reads_the_edited_config_and_keeps_going_on_a_broken_one(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from hivebatch.controller.lease import ControllerLease
    from hivebatch.controller.runner import run_loop
    from hivebatch.db import Base

    engine = env.factory.kw["bind"]
    Base.metadata.create_all(engine)
    lease = ControllerLease(engine)
    lease.acquire()
    cfg = tmp_path / "hivebatch.yaml"
    edits = [
        lambda: cfg.write_text(CONFIG.replace(OLD_CV, "cv: {cells: {V100-NODE: 1}}")),
        lambda: cfg.write_text(CONFIG + "virtual_clusters: [\n"),
    ]
    seen: list[dict[str, dict[str, int]]] = []

    def between_cycles(_s: float) -> None:
        seen.append(_cells(env)["cv"])
        if edits:
            edits.pop(0)()

    caplog.set_level("INFO", logger="hivebatch.controller")
    run_loop(env.ctx, env.factory, env.ctl, lease, 1.0, sleep=between_cycles, cycles=3)
    assert seen == [{"V100-NODE": 1, "V100-SOCKET": 1}, {"V100-NODE": 1}, {"V100-NODE": 1}]
    assert f"config {cfg} read again" in caplog.messages
    broken = [m for m in caplog.messages if m.startswith(f"config {cfg} changed but cannot be used (")]
    assert len(broken) == 1 and broken[0].endswith("going on with the one read before")
    assert not [m for m in caplog.messages if m.startswith("cycle failed")]


def test_a_gpu_slice_of_a_removed_vc_stays_as_opportunistic_work_until_its_gpu_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    sharing = "\nsharing: {enabled: true}\n"
    env = make_env(tmp_path, CONFIG + sharing)
    cv8, cv4, nlp = env.submit("alice", "cv", 8), env.submit("alice", "cv", 4), env.submit("bob", "nlp", 16)
    piece = env.submit("carol", "sys", 1, gpu_mem_mib=8 * 1024)
    env.cycle()
    env.slurm.schedule()
    env.cycle()
    assert [env.job(j).state for j in (cv8, cv4, nlp, piece)] == ["running"] * 4
    merged = CONFIG.replace(OLD_SYS, "").replace(
        OLD_CV, "cv: {cells: {V100-NODE: 1, V100-SOCKET: 1, V100-SWITCH: 1, V100: 2}}"
    )
    env = _reconfigure(env, tmp_path, merged + sharing)
    assert not env.cycle().failures
    kept = env.job(piece)
    assert kept.state == "running"
    assert kept.reason.startswith(
        "holds GPUs of VC sys, which the config no longer has: it keeps them as opportunistic work"
    )
    # before: "its GPU slice cannot be booked (…); the GPU is held as foreign", until it ended
    cv = [env.submit("alice", "cv", 2), env.submit("alice", "cv", 1), env.submit("alice", "cv", 1)]
    env.cycle()
    env.slurm.schedule()
    env.cycle()
    assert env.job(piece).preemptions == 1
    assert [env.job(j).state for j in cv] == ["running"] * 3
