"""Engines and sessions: the database URL from the config, SQLite tuned for one writer and many readers.

SQLite (the default) runs in WAL mode so ``hq`` can read while the controller writes, with a busy
timeout instead of "database is locked" errors. PostgreSQL is used when ``database.url`` says so
(``postgresql+psycopg://user@host/db``; a bare ``postgresql://`` is given the psycopg 3 driver).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from hivebatch.errors import ConfigError, HivebatchError

DEFAULT_URL = "sqlite:///var/hivebatch.db"
URL_ENV = "HIVEBATCH_DATABASE_URL"
BUSY_TIMEOUT_MS = 10_000


def database_url(config_path: str | os.PathLike[str] | None, data: Mapping[str, Any] | None) -> str:
    """The SQLAlchemy URL of ``database.url``; a relative SQLite path is relative to the config's directory.

    $HIVEBATCH_DATABASE_URL overrides the config (tests, one-off inspection of another DB).
    """
    raw: Any = os.environ.get(URL_ENV)
    if not raw:
        section = (data or {}).get("database") or {}
        if not isinstance(section, Mapping):
            raise ConfigError(
                "database: must be a mapping with a url, e.g. {url: sqlite:///var/hivebatch.db}"
            )
        raw = section.get("url", DEFAULT_URL)
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(
            "database.url must be a URL such as sqlite:///var/hivebatch.db or postgresql+psycopg://…"
        )
    try:
        url = make_url(raw.strip())
    except ArgumentError:
        raise ConfigError(
            f"database.url {raw!r} is not a database URL (sqlite:///FILE or postgresql+psycopg://…)"
        ) from None
    if url.drivername == "postgresql" or url.drivername == "postgres":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() == "sqlite":
        db = url.database
        if db and db != ":memory:" and not db.startswith("file:"):
            path = Path(db).expanduser()
            if not path.is_absolute():
                base = Path(config_path).resolve().parent if config_path else Path.cwd()
                path = base / path
            url = url.set(database=str(path))
    elif url.get_backend_name() != "postgresql":
        raise ConfigError(
            f"database.url: {url.get_backend_name()} is not supported; use sqlite or postgresql+psycopg"
        )
    return url.render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # safe with WAL: a crash loses at most the last commit
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_read_only(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA query_only=ON")
    cur.close()


def make_engine(url: str, read_only: bool = False) -> Engine:
    """An engine for ``url``; SQLite files get WAL and a busy timeout, their directory is created."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database
        if db and db != ":memory:" and not read_only:
            try:
                Path(db).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HivebatchError(
                    f"cannot create the database directory {Path(db).parent}: {exc.strerror}"
                ) from None
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_read_only if read_only else _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": 10}
    if read_only:
        connect_args["options"] = "-c default_transaction_read_only=on"
    try:
        return create_engine(url, connect_args=connect_args, pool_pre_ping=True)
    except ModuleNotFoundError as exc:  # psycopg is an optional extra
        raise HivebatchError(
            f"database.url names PostgreSQL but {exc.name} is not installed: pip install 'hivebatch[postgres]'"
        ) from None


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: the controller keeps using the rows it loaded after each step's commit
    return sessionmaker(engine, expire_on_commit=False)


def open_database(
    config_path: str | os.PathLike[str] | None, data: Mapping[str, Any] | None, read_only: bool = False
) -> tuple[Engine, sessionmaker[Session]]:
    engine = make_engine(database_url(config_path, data), read_only=read_only)
    return engine, make_sessionmaker(engine)


@contextmanager
def read_only_session(
    config_path: str | os.PathLike[str] | None, data: Mapping[str, Any] | None
) -> Iterator[Session | None]:
    """A session for readers (hq, hadmin), or None when the database does not exist or is not migrated yet.

    Readers then show what Slurm alone says; they never create or migrate the database.
    """
    url = database_url(config_path, data)
    parsed = make_url(url)
    db_file = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if db_file and db_file != ":memory:" and not Path(db_file).exists():
        yield None
        return
    engine = make_engine(url, read_only=True)
    try:
        try:
            with engine.connect() as conn:
                migrated = inspect(conn).has_table("jobs")
        except OperationalError as exc:
            raise HivebatchError(
                f"cannot open the database {parsed.render_as_string()}: {_first_line(exc)}"
            ) from None
        if not migrated:
            yield None
            return
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


def schema_is_current(engine: Engine) -> bool:
    """True when the database is migrated to the newest revision shipped with this hivebatch."""
    from hivebatch.db.migrate import head_revision

    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return False
            from sqlalchemy import text

            current = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except (OperationalError, ProgrammingError):
        return False
    return current == head_revision()


def check_connection(engine: Engine) -> None:
    """Raise one clear line when the database cannot be reached."""
    from sqlalchemy import text

    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except (OperationalError, ProgrammingError) as exc:
        raise HivebatchError(f"cannot reach the database: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig or exc).strip().splitlines()[0]
