"""Database URL resolution, SQLite tuning and the read-only reader session."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from hivebatch.db import Base, Job, database_url, make_engine, make_sessionmaker, read_only_session
from hivebatch.errors import ConfigError


def test_relative_sqlite_path_is_relative_to_the_config_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    cfg = tmp_path / "etc" / "hivebatch.yaml"
    url = database_url(cfg, {"database": {"url": "sqlite:///var/hb.db"}})
    assert url == f"sqlite:///{tmp_path / 'etc' / 'var' / 'hb.db'}"


def test_default_url_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    assert database_url(tmp_path / "c.yaml", {}) == f"sqlite:///{tmp_path / 'var' / 'hivebatch.db'}"
    assert (
        database_url(tmp_path / "c.yaml", {"database": {"url": "sqlite:////srv/x.db"}})
        == "sqlite:////srv/x.db"
    )


def test_postgres_url_gets_the_psycopg_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    url = database_url(None, {"database": {"url": "postgresql://hb:secret@db.example/hb"}})
    assert url == "postgresql+psycopg://hb:secret@db.example/hb"


def test_environment_overrides_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVEBATCH_DATABASE_URL", f"sqlite:///{tmp_path}/other.db")
    assert database_url(tmp_path / "c.yaml", {"database": {"url": "sqlite:///x.db"}}).endswith("other.db")


@pytest.mark.parametrize(
    "section",
    [
        {"database": {"url": "mysql://x/y"}},
        {"database": {"url": ""}},
        {"database": "sqlite"},
        {"database": {"url": "::"}},
    ],
)
def test_bad_database_section_is_one_config_error(section: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    with pytest.raises(ConfigError):
        database_url(None, section)


def test_sqlite_runs_in_wal_mode_with_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/sub/hb.db")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 10000
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    assert (tmp_path / "sub").is_dir()


def test_reader_sees_committed_rows_while_the_writer_holds_a_transaction(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hb.db"
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    factory = make_sessionmaker(engine)
    with factory() as s:
        s.add(Job(slurm_job_id=1, state="queued", gpus=1))
        s.commit()
    writer = factory()
    writer.add(Job(slurm_job_id=2, state="queued", gpus=1))
    writer.flush()  # an open write transaction
    reader = sqlite3.connect(f"{tmp_path}/hb.db", timeout=0.1)
    assert reader.execute("select count(*) from jobs").fetchone()[0] == 1  # WAL: no 'database is locked'
    writer.commit()
    assert reader.execute("select count(*) from jobs").fetchone()[0] == 2
    reader.close()
    writer.close()


def test_read_only_session_is_none_without_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    with read_only_session(tmp_path / "c.yaml", {"database": {"url": "sqlite:///none.db"}}) as s:
        assert s is None
    assert not (tmp_path / "none.db").exists()  # readers never create the database


def test_read_only_session_is_none_when_not_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    sqlite3.connect(tmp_path / "empty.db").close()
    with read_only_session(tmp_path / "c.yaml", {"database": {"url": "sqlite:///empty.db"}}) as s:
        assert s is None


def test_read_only_session_reads_but_refuses_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    engine = make_engine(f"sqlite:///{tmp_path}/hb.db")
    Base.metadata.create_all(engine)
    with make_sessionmaker(engine)() as s:
        s.add(Job(slurm_job_id=7, state="running", gpus=2, placement={"node2": [3, 5]}))
        s.commit()
    with read_only_session(tmp_path / "c.yaml", {"database": {"url": "sqlite:///hb.db"}}) as s:
        assert s is not None
        job = s.query(Job).one()
        assert job.placement == {"node2": [3, 5]}
        s.add(Job(slurm_job_id=8, state="queued", gpus=1))
        with pytest.raises(OperationalError):
            s.flush()
