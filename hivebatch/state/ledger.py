"""Read-only access to the controller's ledger for ``hq``, ``hq vc`` and ``hsub --test-only``.

A SQLite ledger (the default) is read with the standard library's sqlite3, read-only, so ``hq``
starts about as fast as ``squeue`` (SQLAlchemy alone takes longer to import than squeue takes to
answer). Other databases go through ``hivebatch.db``. Either way rows come back as plain objects
with the attribute names of ``hivebatch.db.models.Job``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hivebatch.errors import HivebatchError
from hivebatch.state.jobstates import FINAL_STATES

URL_ENV = "HIVEBATCH_DATABASE_URL"
DEFAULT_URL = "sqlite:///var/hivebatch.db"
JOB_COLUMNS = (
    "slurm_job_id", "name", "user", "account", "vc_name", "qos", "priority", "foreign", "request", "gpus",
    "gpu_type", "state", "reason", "placement", "predicted_start", "predicted_end", "expected_completion",
    "slack_s", "submit_time", "start_time", "end_time", "preemptions", "intent", "gres", "latency_s",
    "shape_nodes", "shape_gpn", "placed_at", "segment_start", "notice_until", "notice_by",
)  # fmt: skip
JSON_COLUMNS = ("request", "placement")
TIME_COLUMNS = (
    "predicted_start",
    "predicted_end",
    "expected_completion",
    "submit_time",
    "start_time",
    "end_time",
    "placed_at",
    "segment_start",
    "notice_until",
)


def raw_url(config_path: Path | None, config: Mapping[str, Any]) -> str:
    url = os.environ.get(URL_ENV)
    if url:
        return url
    section = config.get("database") or {}
    return str(section.get("url", DEFAULT_URL)) if isinstance(section, Mapping) else DEFAULT_URL


def sqlite_file(url: str, config_path: Path | None) -> Path | None:
    """The file of a ``sqlite:///FILE`` URL (relative to the config's directory), else None."""
    if not url.startswith("sqlite:///"):
        return None
    rest = url[len("sqlite:///") :].split("?", 1)[0]
    if not rest or rest == ":memory:":
        return None
    path = Path(rest).expanduser()
    if not path.is_absolute():
        base = config_path.resolve().parent if config_path else Path.cwd()
        path = base / path
    return path


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def _row(names: list[str], values: tuple[Any, ...]) -> SimpleNamespace:
    data = dict(zip(names, values, strict=True))
    for col in JSON_COLUMNS:
        if isinstance(data.get(col), str):
            data[col] = json.loads(data[col])
    for col in TIME_COLUMNS:
        data[col] = _parse_time(data.get(col))
    data["foreign"] = bool(data.get("foreign"))
    return SimpleNamespace(**data)


class Ledger:
    """The jobs, cell snapshot and GPU bindings the controller last wrote; empty when there is no DB."""

    def __init__(self, jobs: list[Any], snapshot: dict[str, Any] | None, bindings: list[Any], available: bool,
                 snapshot_time: dt.datetime | None = None):  # fmt: skip
        self.snapshot_time = snapshot_time
        self.jobs = jobs
        self.snapshot = snapshot
        self.bindings = bindings
        self.available = available


def _where(include_final: bool, job_ids: set[int] | None) -> tuple[str, list[Any]]:
    if include_final:
        return "", []
    marks = ",".join("?" for _ in FINAL_STATES)
    clause = f" WHERE state NOT IN ({marks})"
    params: list[Any] = list(FINAL_STATES)
    if job_ids:
        clause += f" OR slurm_job_id IN ({','.join('?' for _ in job_ids)})"
        params += sorted(job_ids)
    return clause, params


def _query_sqlite(conn: Any, include_final: bool, job_ids: set[int] | None, want_cells: bool) -> Ledger:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "jobs" not in tables:
        return Ledger([], None, [], False)
    clause, params = _where(include_final, job_ids)
    cols = ", ".join(f'"{c}"' for c in JOB_COLUMNS)
    cur = conn.execute(f"SELECT {cols} FROM jobs{clause}", params)  # noqa: S608 - fixed column names
    jobs = [_row(list(JOB_COLUMNS), r) for r in cur.fetchall()]
    snapshot = None
    snapshot_time = None
    bindings: list[Any] = []
    if "cell_snapshots" in tables:  # its time is the last cycle's, which hq checks even without the cells
        data = "data" if want_cells else "NULL"
        found = conn.execute(
            f"SELECT {data}, taken_at FROM cell_snapshots ORDER BY taken_at DESC, id DESC LIMIT 1"  # noqa: S608
        ).fetchone()
        snapshot = json.loads(found[0]) if found and found[0] else None
        snapshot_time = _parse_time(found[1]) if found else None
    if want_cells and "gpu_bindings" in tables:
        names = ["node", "gpu_index", "gpu_type", "vc_name", "slurm_job_id", "kind", "bad"]
        cur = conn.execute(f"SELECT {', '.join(names)} FROM gpu_bindings")  # noqa: S608
        bindings = [SimpleNamespace(**dict(zip(names, r, strict=True))) for r in cur.fetchall()]
    return Ledger(jobs, snapshot, bindings, True, snapshot_time)


def _file_state(path: Path) -> tuple[int, int, int]:
    """(mtime, size, WAL size) of the ledger: unchanged across a read means nobody wrote during it."""
    st = path.stat()
    wal = Path(f"{path}-wal")
    return st.st_mtime_ns, st.st_size, wal.stat().st_size if wal.exists() else 0


def _read_sqlite(path: Path, include_final: bool, job_ids: set[int] | None, want_cells: bool) -> Ledger:
    """Read-only, without ever writing. A WAL-mode ledger normally needs its -shm file writable even by
    readers; users who may not write the ledger's directory read the main file directly instead
    ("immutable"), which is exact when no WAL is pending, checked by the file not changing meanwhile."""
    import sqlite3
    import time

    attempts = 0
    while True:
        attempts += 1
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
            try:
                return _query_sqlite(conn, include_final, job_ids, want_cells)
            finally:
                conn.close()
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc) and "unable to open" not in str(exc):
                raise HivebatchError(f"cannot read the database {path}: {exc}") from None
            problem = exc
        before = _file_state(path)
        if before[2] == 0:  # nothing pending in a WAL: the main file is the whole ledger
            conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
            try:
                ledger = _query_sqlite(conn, include_final, job_ids, want_cells)
            except sqlite3.Error:
                ledger = None  # read while the controller was writing: try again
            finally:
                conn.close()
            if ledger is not None and _file_state(path) == before:
                return ledger
        if attempts >= 50:
            raise HivebatchError(
                f"cannot read the database {path}: {problem} (the controller keeps writing to it; "
                "try again, or ask your administrator to let you read it)"
            )
        time.sleep(0.1)


def _read_sqlalchemy(config_path: Path | None, config: Mapping[str, Any], include_final: bool,
                     job_ids: set[int] | None, want_cells: bool) -> Ledger:  # fmt: skip
    from sqlalchemy import ColumnElement, or_, select

    from hivebatch.db.models import CellSnapshot, GpuBinding, Job
    from hivebatch.db.session import read_only_session

    with read_only_session(config_path, config) as session:
        if session is None:
            return Ledger([], None, [], False)
        query = select(Job)
        if not include_final:
            cond: ColumnElement[bool] = Job.state.not_in(FINAL_STATES)
            if job_ids:
                cond = or_(cond, Job.slurm_job_id.in_(sorted(job_ids)))
            query = query.where(cond)
        jobs = [SimpleNamespace(**{c: getattr(j, c) for c in JOB_COLUMNS}) for j in session.scalars(query)]
        snapshot = None
        bindings: list[Any] = []
        newest = CellSnapshot.taken_at.desc()
        if want_cells:
            snap = session.scalars(select(CellSnapshot).order_by(newest).limit(1)).first()
            snapshot = snap.data if snap else None
            snapshot_time = snap.taken_at if snap else None
            bindings = list(session.scalars(select(GpuBinding)))
        else:  # the last cycle's time alone, which hq checks
            snapshot_time = session.scalars(select(CellSnapshot.taken_at).order_by(newest).limit(1)).first()
        return Ledger(jobs, snapshot, bindings, True, snapshot_time)


def read_ledger(config_path: Path | None, config: Mapping[str, Any], include_final: bool = False,
                job_ids: set[int] | None = None, want_cells: bool = False) -> Ledger:  # fmt: skip
    url = raw_url(config_path, config)
    path = sqlite_file(url, config_path)
    if path is not None:
        if not path.exists():
            return Ledger([], None, [], False)
        return _read_sqlite(path, include_final, job_ids, want_cells)
    return _read_sqlalchemy(config_path, config, include_final, job_ids, want_cells)
