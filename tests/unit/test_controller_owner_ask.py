"""An owner's new GPU ask for a waiting job, noted by the plugin, becomes the job's in the ledger."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from controller_support import Env, make_env, with_notes_file

from hivebatch.cli.hq.rows import merge_ledger, row_from_slurm
from hivebatch.controller import owner_ask, refusals

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "owner_gpu_update.txt"


def _note(jid: int, ask: dict[str, Any], at: float | None = None) -> str:
    """A line as the plugin writes it (job_submit.lua note_ask; tests/lua/owner_ask_spec.lua)."""
    raw = {"t": int(at if at is not None else time.time()), "job": jid, "uid": 1001, "ask": ask}
    return json.dumps(raw, separators=(",", ":")) + "\n"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return with_notes_file(make_env(tmp_path), tmp_path)


def _cv_full(env: Env) -> tuple[int, int, Path]:
    """cv's 12 GPUs taken (8 + 4) and alice's 1-GPU job waiting: (the 4-GPU job, the waiting one, notes)."""
    env.submit("alice", "cv", 8)
    four = env.submit("alice", "cv", 4)
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    assert env.job(jid).state == "queued" and env.ctx.refusals_path is not None
    return four, jid, env.ctx.refusals_path


def test_the_plain_slurm_record_shows_the_owner_may_change_the_gpus() -> None:
    text = FIXTURE.read_text()
    assert "$ scontrol update JobId=15 Gres=gpu:2     rc=0" in text
    assert "Nodes=node[1-2] CPU_IDs=0 Mem=2000 GRES=gpu:g0:1(IDX:0),gpu:g1:1(IDX:1)" in text
    assert "$ scontrol update JobId=18 Gres=gpu:2     rc=1" in text  # through hivebatch, before


def test_a_new_ask_is_the_jobs_and_it_runs_with_it(env: Env) -> None:
    four, jid, notes = _cv_full(env)
    notes.write_text(_note(jid, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}))
    env.cycle()
    job = env.job(jid)
    assert (job.gpus, job.request["gpus_per_node"], job.request["vc"]) == (2, 2, "cv")
    (ev,) = env.events(jid, kind=owner_ask.KIND)
    assert ev.message.endswith(": now 2 GPU(s), 1 node(s) x 2")
    assert ev.data["before"]["gpus"] == 1
    # hq shows the ledger's ask, not the one Slurm's admin comment still carries
    row = merge_ledger(row_from_slurm(env.slurm.job(jid)), job)
    assert row.gpus == 2
    env.slurm.as_user("alice").cancel(four)
    env.cycle()
    job = env.job(jid)
    assert job.state in ("placed", "running")
    assert sum(len(g) for g in job.placement.values()) == 2
    assert sum(len(g) for g in env.slurm.job_gpus(jid).values()) in (0, 2)  # Slurm starts it on both


def test_hq_shows_no_gpu_type_once_the_new_ask_drops_the_one_submitted(env: Env) -> None:
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 4)
    jid = env.submit("alice", "cv", 1, gpu_type="V100")
    env.cycle()
    assert merge_ledger(row_from_slurm(env.slurm.job(jid)), env.job(jid)).gpu_type == "V100"
    assert env.ctx.refusals_path is not None
    env.ctx.refusals_path.write_text(_note(jid, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}))
    env.cycle()
    job = env.job(jid)
    assert "gpu_type" not in job.request
    # Slurm's admin comment still names the submit's type; the ledger's ask is the job's
    row = merge_ledger(row_from_slurm(env.slurm.job(jid)), job)
    assert (row.gpus, row.gpu_type) == (2, None)


def test_a_smaller_ask_fits_where_the_old_one_waited(env: Env) -> None:
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 2)
    jid = env.submit("alice", "cv", 4)  # 2 of cv's 12 GPUs are free
    env.cycle()
    assert env.job(jid).state == "queued"
    assert env.ctx.refusals_path is not None
    env.ctx.refusals_path.write_text(_note(jid, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}))
    env.cycle()
    assert env.job(jid).state in ("placed", "running")


def test_an_ask_that_came_after_the_job_was_placed_is_an_update_refused(env: Env) -> None:
    four, jid, notes = _cv_full(env)
    env.slurm.as_user("alice").cancel(four)
    env.cycle()
    assert env.job(jid).state in ("placed", "running")
    notes.write_text(_note(jid, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}))
    env.cycle()
    job = env.job(jid)
    assert job.gpus == 1 and job.request["gpus"] == 1
    (ev,) = env.events(jid, kind=refusals.KIND)
    assert "had placed it on GPUs by then, so it runs as it asked before (1 GPU(s))" in ev.message


def test_an_unusable_ask_changes_nothing_and_says_why(env: Env) -> None:
    _four, jid, notes = _cv_full(env)
    notes.write_text(_note(jid, {"gpus": 0}))
    env.cycle()
    assert env.job(jid).request["gpus"] == 1
    (ev,) = env.events(jid, kind=refusals.KIND)
    assert "its new GPU ask is unusable" in ev.message
    assert "; its owner's update at " in env.job(jid).reason


def test_an_ask_older_than_the_job_is_anothers(env: Env) -> None:
    _four, jid, notes = _cv_full(env)
    notes.write_text(_note(jid, {"gpus": 2}, at=time.time() - 86400))
    env.cycle()
    assert env.job(jid).gpus == 1
    assert env.events(jid, kind=owner_ask.KIND) == []


def test_the_latest_of_several_asks_wins(env: Env) -> None:
    _four, jid, notes = _cv_full(env)
    notes.write_text(_note(jid, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}) + _note(jid, {"gpus": 3}))
    env.cycle()
    assert env.job(jid).request["gpus"] == 3 and "gpus_per_node" not in env.job(jid).request
    assert len(env.events(jid, kind=owner_ask.KIND)) == 2


def test_the_line_reads_as_an_ask() -> None:
    note = refusals.parse_line(_note(7, {"gpus": 2, "gpu_type": "V100"}, at=1795957349))
    assert isinstance(note, refusals.AskChange)
    assert (note.slurm_job_id, note.uid, note.ask) == (7, 1001, {"gpus": 2, "gpu_type": "V100"})


def _array_note(array: int, ask: dict[str, Any]) -> str:
    raw = {"t": int(time.time()), "job": array, "uid": 1001, "array": array, "ask": ask}
    return json.dumps(raw, separators=(",", ":")) + "\n"


def test_an_arrays_new_ask_is_every_waiting_tasks_and_the_later_ones(env: Env) -> None:
    env.submit("alice", "cv", 8)
    four = env.submit("alice", "cv", 4)
    array = env.submit("alice", "cv", 1, extra=["--array=0-2%1"])
    env.cycle()
    env.cycle()
    (first,) = [j for j in env.ctl.list_jobs() if j.array_job_id == array and j.job_id != array]
    assert env.job(first.job_id).state == "queued"
    assert env.ctx.refusals_path is not None
    env.ctx.refusals_path.write_text(_array_note(array, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}))
    env.cycle()
    assert (
        env.job(first.job_id).gpus == 2 and env.job(array).gpus == 2
    )  # the split task and the array's record
    env.slurm.as_user("alice").cancel(four)
    env.cycle()
    env.cycle()
    assert sum(len(g) for g in env.slurm.job_gpus(first.job_id).values()) == 2
    env.slurm.finish(first.job_id)
    for _ in range(3):
        env.cycle()
    later = [j for j in env.ctl.list_jobs() if j.array_job_id == array and j.array_task_id == 1]
    assert later and env.job(later[0].job_id).gpus == 2, later  # split off after the update, with its ask
    assert env.job(later[0].job_id).request["gpus_per_node"] == 2


def test_an_array_task_already_placed_keeps_its_gpus(env: Env) -> None:
    array = env.submit("alice", "cv", 1, extra=["--array=0-2%1"])
    env.cycle()
    env.cycle()
    (first,) = [j for j in env.ctl.list_jobs() if j.array_job_id == array and j.job_id != array]
    assert env.job(first.job_id).state in ("placed", "running")
    assert env.ctx.refusals_path is not None
    env.ctx.refusals_path.write_text(_array_note(array, {"gpus": 2, "gpus_per_node": 2, "nodes": 1}))
    env.cycle()
    assert env.job(first.job_id).gpus == 1 and env.job(array).gpus == 2
    assert env.events(first.job_id, kind=refusals.KIND) == []  # as Slurm's running tasks keep theirs
