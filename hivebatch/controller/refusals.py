"""The owner updates the job_submit plugin refused, and the new GPU asks it let through, read from the
file it notes them in.

slurmctld passes no message back from ``job_modify``: a refused ``scontrol update`` prints only
``Access/permission denied for job N``. The plugin appends each refusal as one JSON line to a file only
slurmctld's user may write (``controller.refusals_file``); the controller records each as an event and
adds the latest to the job's waiting reason for an hour, so that ``hq`` says what to change.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.controller.record import Recorder, set_state
from hivebatch.db.models import Event, Job
from hivebatch.state.shares import get_state

log = logging.getLogger(__name__)

KIND = "update_refused"
#: how long the latest refusal stays in the job's waiting reason
SHOWN_S = 3600.0
#: at most this much of the file is read in one cycle (the plugin rotates it at 1 MB)
READ_MAX_BYTES = 1 << 20
_STATE_KEY = "refusals_read"

#: files whose permissions were found unsafe: logged once
_UNSAFE: set[Path] = set()


@dataclass(frozen=True)
class Refusal:
    at: dt.datetime  # naive UTC, as the ledger keeps times
    slurm_job_id: int
    uid: int
    message: str


def unsafe(path: Path, st: os.stat_result) -> str | None:
    """Why the file cannot be trusted: someone besides its owner may write it or its directory, or its
    owner is neither root nor the directory's (slurmctld's user owns both where the install guide says)."""
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} may be written by others than its owner (mode {stat.S_IMODE(st.st_mode):o})"
    parent = path.parent.stat()
    if st.st_uid not in (0, parent.st_uid):
        return f"{path} belongs to uid {st.st_uid}, neither root nor the owner of its directory"
    if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX:
        return f"its directory {path.parent} may be written by others (mode {stat.S_IMODE(parent.st_mode):o})"
    return None


@dataclass(frozen=True)
class AskChange:
    """An owner's new GPU ask for a job still waiting for GPUs, which the plugin let through
    (hivebatch.controller.owner_ask applies it)."""

    at: dt.datetime
    slurm_job_id: int
    uid: int
    ask: dict[str, Any]
    array: int | None = None  # the array's job id: the ask is every waiting task's


@dataclass(frozen=True)
class StartTime:
    """A start time an owner set on a job waiting for GPUs (hivebatch.controller.owner_start keeps it)."""

    at: dt.datetime
    slurm_job_id: int
    uid: int
    begin: dt.datetime  # naive UTC


Note = Refusal | AskChange | StartTime


def parse_line(line: str) -> Note | None:
    """One note; None for a line that is not one (cut short by a rotation, or foreign)."""
    try:
        raw = json.loads(line)
        at = dt.datetime.fromtimestamp(int(raw["t"]), dt.UTC).replace(tzinfo=None)
        if "begin" in raw:
            begin = dt.datetime.fromtimestamp(int(raw["begin"]), dt.UTC).replace(tzinfo=None)
            return StartTime(at, int(raw["job"]), int(raw["uid"]), begin)
        if isinstance(raw.get("ask"), dict):
            array = int(raw["array"]) if "array" in raw else None
            return AskChange(at, int(raw["job"]), int(raw["uid"]), raw["ask"], array)
        return Refusal(at, int(raw["job"]), int(raw["uid"]), str(raw["msg"]))
    except (ValueError, TypeError, KeyError, OverflowError, OSError):
        return None


def read_new(session: Session, path: Path, now: dt.datetime) -> list[Note]:
    """The notes written since the last cycle's read (a rotated or replaced file is read from its start)."""
    try:
        st = path.stat()
    except OSError:
        return []
    why = unsafe(path, st)
    if why is not None:
        if path not in _UNSAFE:
            log.warning("not reading the plugin's refusals: %s", why)
            _UNSAFE.add(path)
        return []
    seen = get_state(session, _STATE_KEY) or {}
    offset = int(seen.get("offset", 0)) if seen.get("inode") == st.st_ino else 0
    if offset > st.st_size:
        offset = 0
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(READ_MAX_BYTES)
    except OSError:
        return []
    whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next cycle
    set_state(session, _STATE_KEY, {"inode": st.st_ino, "offset": offset + len(whole)}, now)
    lines = whole.decode("utf-8", errors="replace").splitlines()
    return [r for r in map(parse_line, lines) if r is not None]


def job_of(note: Note, jobs: dict[int, Job]) -> Job | None:
    """The ledger's job a note is about; None for a job it does not follow, or for a note older than
    the job (another's of the same id, from a Slurm whose job ids began again)."""
    job = jobs.get(note.slurm_job_id)
    if job is None or (job.submit_time is not None and note.at < job.submit_time - dt.timedelta(seconds=1)):
        return None
    return job


REFUSED_PREFIX = "its owner's update at "


def refused(session: Session, rec: Recorder, job: Job, at: dt.datetime, uid: int, what: str) -> None:
    """The event that ends the job's waiting reason for an hour (``recent``)."""
    rec.event(session, job, KIND, f"{REFUSED_PREFIX}{at:%H:%M UTC} was refused: {what}", {"uid": uid})


def is_refusal(reason: str) -> bool:
    return reason.startswith(REFUSED_PREFIX)


def record(session: Session, rec: Recorder, notes: list[Note], jobs: dict[int, Job]) -> None:
    """An event for each refusal of a job the ledger follows (the owner's, since Slurm lets no one
    else's update reach the plugin)."""
    for r in notes:
        job = job_of(r, jobs)
        if isinstance(r, Refusal) and job is not None:
            refused(session, rec, job, r.at, r.uid, r.message.removeprefix("hivebatch: "))


def recent(session: Session, now: dt.datetime) -> dict[int, str]:
    """Per Slurm job id, its latest refusal of the last hour, as the waiting reason's addition."""
    since = now - dt.timedelta(seconds=SHOWN_S)
    rows = session.execute(
        select(Event.slurm_job_id, Event.message)
        .where(Event.kind == KIND, Event.time >= since)
        .order_by(Event.time, Event.id)
    )
    out: dict[int, str] = {}
    for sid, message in rows:
        if sid is not None:
            out[int(sid)] = message
    return out


def with_refusal(reason: str, refusal: str | None) -> str:
    return f"{reason}; {refusal}" if refusal else reason


def read(session: Session, path: Path | None, now: dt.datetime) -> list[Note]:
    """The notes written since the last cycle's read; none where this controller reads none."""
    return read_new(session, path, now) if path is not None else []


__all__ = [
    "KIND",
    "AskChange",
    "Note",
    "Refusal",
    "StartTime",
    "is_refusal",
    "job_of",
    "read",
    "read_new",
    "recent",
    "record",
    "refused",
    "unsafe",
    "with_refusal",
]
