"""One controller per database: a lease row, and on PostgreSQL also a session advisory lock.

The exclusivity lives in the database every controller writes, so two controllers sharing a
database exclude each other whatever host, user or config file they run from, and nothing an
ordinary user can lock (a file) can keep the controller from running.

- PostgreSQL: ``pg_try_advisory_lock`` on a connection held for the controller's life; the server
  drops it when that connection or process dies, however it dies. The lease row beside it only
  tells a second controller who holds the lock.
- SQLite: the lease row is the lock. It is taken with one compare-and-set UPDATE (atomic in the
  database), renewed every cycle and before acting, and given back on exit. A holder killed with
  ``kill -9`` on the same host is recognised by its dead pid and replaced at once; one on another
  host after ``expires_at``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid
from types import TracebackType

from sqlalchemy import Connection, Engine, delete, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from hivebatch.db.models import ControllerLease as LeaseRow
from hivebatch.db.models import utcnow
from hivebatch.errors import HivebatchError

LEASE_NAME = "controller"
#: the advisory lock key: the bytes "hbctl" read as a number, so it is unlikely to clash with others
ADVISORY_KEY = int.from_bytes(b"hbctl", "big")
MIN_TTL_S = 300.0


class AlreadyRunning(HivebatchError):
    """Another controller holds this database: this one must not run (and exits non-zero)."""

    def __init__(self, holder: str) -> None:
        super().__init__(f"another controller holds this database ({holder}); not running")
        self.holder = holder


class LeaseLost(HivebatchError):
    """The lease expired and another controller took it: this one stops before it acts again."""


def lease_ttl(interval_s: float) -> float:
    """How long a lease lasts unrenewed: several cycles, and never less than MIN_TTL_S."""
    return max(MIN_TTL_S, 5 * interval_s)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(row: LeaseRow | None) -> str:
    if row is None:
        return "holder unknown"
    return f"pid {row.holder_pid} on {row.holder_host} since {row.acquired_at:%Y-%m-%d %H:%M:%S} UTC"


class ControllerLease:
    def __init__(self, engine: Engine, ttl_s: float = MIN_TTL_S) -> None:
        self.engine = engine
        self.ttl = dt.timedelta(seconds=ttl_s)
        self.token = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._pg: Connection | None = None
        self.held = False

    @property
    def postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def acquire(self) -> None:
        """Take the lease or raise AlreadyRunning naming the holder."""
        if self.postgres:
            self._lock_postgres()
        now = utcnow()
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(LeaseRow).values(name=LEASE_NAME, **self._values(now)))
            self.held = True
            return
        except IntegrityError:
            pass  # a row is there: take it over only if its holder is gone
        with self.engine.begin() as conn:
            row = self._row(conn)
            if row is not None and not self._may_take(row, now):
                taken = 0
            else:
                taken = conn.execute(
                    update(LeaseRow)
                    .where(LeaseRow.name == LEASE_NAME, LeaseRow.token == (row.token if row else ""))
                    .values(**self._values(now))
                ).rowcount
        if taken != 1:
            self._unlock_postgres()
            raise AlreadyRunning(_describe(row))
        self.held = True

    def renew(self) -> None:
        """Extend the lease; LeaseLost when another controller has taken it meanwhile."""
        now = utcnow()
        with self.engine.begin() as conn:
            kept = conn.execute(
                update(LeaseRow)
                .where(LeaseRow.name == LEASE_NAME, LeaseRow.token == self.token)
                .values(expires_at=now + self.ttl)
            ).rowcount
            holder = None if kept == 1 else self._row(conn)
        if kept != 1:
            self.held = False
            raise LeaseLost(f"the controller lease was taken over ({_describe(holder)}); stopping")

    def release(self) -> None:
        if self.held:
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        delete(LeaseRow).where(LeaseRow.name == LEASE_NAME, LeaseRow.token == self.token)
                    )
            finally:
                self.held = False
        self._unlock_postgres()

    def __enter__(self) -> ControllerLease:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    # --- internals -------------------------------------------------------------------------------

    def _values(self, now: dt.datetime) -> dict[str, object]:
        return {
            "token": self.token,
            "holder_host": self.host,
            "holder_pid": self.pid,
            "acquired_at": now,
            "expires_at": now + self.ttl,
        }

    def _row(self, conn: Connection) -> LeaseRow | None:
        found = conn.execute(select(LeaseRow.__table__).where(LeaseRow.name == LEASE_NAME)).first()
        return LeaseRow(**found._mapping) if found is not None else None

    def _may_take(self, row: LeaseRow, now: dt.datetime) -> bool:
        if self.postgres:
            return True  # the advisory lock is ours: the row is only a stale note
        if row.token == self.token or row.expires_at <= now:
            return True
        return row.holder_host == self.host and not _pid_alive(row.holder_pid)

    def _lock_postgres(self) -> None:
        conn = self.engine.connect()
        got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_KEY}).scalar()
        conn.commit()
        if not got:
            with self.engine.connect() as other:
                row = self._row(other)
            conn.close()
            raise AlreadyRunning(_describe(row))
        self._pg = conn

    def _unlock_postgres(self) -> None:
        if self._pg is not None:
            try:
                self._pg.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_KEY})
                self._pg.commit()
            finally:
                self._pg.close()
                self._pg = None
