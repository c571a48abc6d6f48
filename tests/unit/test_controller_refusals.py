"""The owner updates the plugin refused reach the job's waiting reason (hq's), read from its notes."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import time
from pathlib import Path

import pytest
from controller_support import Env, make_env, with_notes_file
from sqlalchemy import select

from hivebatch.cli.hq.rows import merge_ledger, row_from_slurm
from hivebatch.controller import refusals
from hivebatch.controller.record import Recorder
from hivebatch.db.models import Event

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "refused_update_note.txt"
NODE_COUNT = "the node count of hivebatch job {jid} is set by hivebatch: cancel and resubmit to change it"


def _recorded_line() -> str:
    (line,) = [ln for ln in FIXTURE.read_text().splitlines() if ln.startswith('{"t":')]
    return line


def _note(jid: int, at: float | None = None, msg: str | None = None) -> str:
    """A line as the plugin writes it (tests/fixtures/slurm/refused_update_note.txt)."""
    raw = json.loads(_recorded_line())
    raw.update(t=int(at if at is not None else time.time()), job=jid)
    raw["msg"] = msg or "hivebatch: " + NODE_COUNT.format(jid=jid)
    return json.dumps(raw, separators=(",", ":")) + "\n"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return with_notes_file(make_env(tmp_path), tmp_path)


def _waiting(env: Env) -> tuple[int, Path]:
    """A job waiting for cv's cells, and the file the plugin notes refusals in."""
    env.submit("alice", "cv", 8)  # all of cv's cells
    env.submit("alice", "cv", 4)
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    assert env.job(jid).state == "queued" and env.ctx.refusals_path is not None
    return jid, env.ctx.refusals_path


def test_the_recorded_note_reads_as_a_refusal() -> None:
    r = refusals.parse_line(_recorded_line())
    assert r is not None and (r.slurm_job_id, r.uid) == (2949, 1001)
    assert r.message == "hivebatch: " + NODE_COUNT.format(jid=2949)
    assert r.at == dt.datetime(2026, 11, 29, 8, 41, 18)
    assert refusals.parse_line('{"t":1795941678,"job":2949,"uid":1001,"ms') is None


def test_a_refused_update_ends_the_jobs_reason_once_noted(env: Env) -> None:
    jid, notes = _waiting(env)
    notes.write_text(_note(jid))
    env.cycle()
    reason = env.job(jid).reason
    assert "; its owner's update at " in reason
    assert reason.endswith(" UTC was refused: " + NODE_COUNT.format(jid=jid))
    # read once: the next cycles neither record it again nor lose it from the reason
    env.cycle()
    env.cycle()
    assert len(env.events(jid, kind=refusals.KIND)) == 1
    assert env.job(jid).reason == reason


def test_a_line_still_being_written_waits_for_the_next_cycle(env: Env) -> None:
    jid, notes = _waiting(env)
    line = _note(jid)
    notes.write_text(line[:20])
    env.cycle()
    assert not env.events(jid, kind=refusals.KIND)
    with notes.open("a") as f:
        f.write(line[20:])
    env.cycle()
    assert len(env.events(jid, kind=refusals.KIND)) == 1


def test_a_rotated_file_is_read_from_its_start(env: Env) -> None:
    jid, notes = _waiting(env)
    notes.write_text(_note(jid) * 3)
    env.cycle()
    notes.rename(notes.with_name("refused.log.1"))  # the plugin's rotation: a new file, shorter
    notes.write_text(_note(jid, msg="hivebatch: the GPU ask of hivebatch job 2 is set by hivebatch"))
    env.cycle()
    kinds = env.events(jid, kind=refusals.KIND)
    assert len(kinds) == 4 and "the GPU ask" in kinds[-1].message
    assert "the GPU ask" in env.job(jid).reason


def test_notes_others_may_write_are_not_believed(env: Env) -> None:
    jid, notes = _waiting(env)
    notes.write_text(_note(jid))
    notes.chmod(0o666)
    env.cycle()
    assert not env.events(jid, kind=refusals.KIND)
    notes.chmod(0o644)
    notes.parent.chmod(0o777)
    env.cycle()
    assert not env.events(jid, kind=refusals.KIND)


def test_a_note_file_someone_else_put_there_is_not_believed(tmp_path: Path) -> None:
    # a shared directory (sticky, as /tmp): another user may create the file before slurmctld does
    notes = tmp_path / "refused.log"
    notes.write_text(_note(1))
    tmp_path.chmod(0o1777)
    real = notes.stat()
    owner = tmp_path.stat().st_uid

    def owned_by(uid: int) -> os.stat_result:
        fields = list(real)
        fields[stat.ST_UID] = uid
        return os.stat_result(fields)

    assert refusals.unsafe(notes, owned_by(owner)) is None
    assert refusals.unsafe(notes, owned_by(0)) is None
    why = refusals.unsafe(notes, owned_by(owner + 4242))
    assert why is not None and "neither root nor the owner of its directory" in why


def test_notes_of_other_jobs_or_older_than_the_job_are_left(env: Env) -> None:
    jid, notes = _waiting(env)
    # a job id used before (a Slurm whose ids began again), and one the ledger does not follow
    notes.write_text(_note(jid, at=time.time() - 86400) + _note(jid + 1000) + "not json\n")
    env.cycle()
    assert not env.events(kind=refusals.KIND)
    assert "refused" not in (env.job(jid).reason or "")


def test_a_refusal_leaves_the_reason_after_an_hour(env: Env) -> None:
    jid, notes = _waiting(env)
    notes.write_text(_note(jid))
    env.cycle()
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with env.factory() as s:
        assert jid in refusals.recent(s, now)
        assert jid not in refusals.recent(s, now + dt.timedelta(seconds=refusals.SHOWN_S + 60))


def test_recording_needs_a_job_the_ledger_follows() -> None:
    class Session:
        added: list[object] = []

        def add(self, row: object) -> None:
            self.added.append(row)

    s = Session()
    r = refusals.parse_line(_recorded_line())
    assert r is not None
    refusals.record(s, Recorder(r.at), [r], {})  # type: ignore[arg-type]
    assert s.added == []


def test_a_running_jobs_refused_update_is_its_reason_for_an_hour(env: Env) -> None:
    # a running job has no waiting reason, and scontrol said only "Access/permission denied"
    jid = env.submit("alice", "cv", 1)
    env.cycle()
    env.cycle()
    assert env.job(jid).state == "running" and env.job(jid).reason is None
    assert env.ctx.refusals_path is not None
    msg = f"hivebatch: the node list of hivebatch job {jid} is set by hivebatch: cancel and resubmit to change it"
    env.ctx.refusals_path.write_text(_note(jid, at=env.slurm.now().timestamp(), msg=msg))
    env.cycle()
    reason = env.job(jid).reason
    assert reason is not None and reason.endswith(" UTC was refused: " + msg.removeprefix("hivebatch: "))
    row = merge_ledger(row_from_slurm(env.slurm.job(jid)), env.job(jid))
    assert row.state == "RUNNING" and row.reason == reason
    with env.factory() as s:  # an hour later
        for ev in s.scalars(select(Event).where(Event.kind == refusals.KIND)):
            ev.time -= dt.timedelta(seconds=refusals.SHOWN_S + 60)
        s.commit()
    env.cycle()
    assert env.job(jid).state == "running" and env.job(jid).reason is None
