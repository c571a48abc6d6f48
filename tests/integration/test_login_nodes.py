"""docs/login-nodes.md on the lab's PostgreSQL: the page's own SQL creates the read-only role, hq reads
the ledger through it, and a write through it is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
PAGE = PROJECT / "docs" / "login-nodes.md"


def page_sql(database: str, owner: str, role: str) -> list[str]:
    """The page's ```sql statements, for this test's database, owner and reader role."""
    block = re.search(r"```sql\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert block is not None
    text = "\n".join(ln for ln in block.group(1).splitlines() if not ln.startswith("--"))
    text = re.sub(r"\bhivebatch_ro\b", role, text)
    text = re.sub(r"DATABASE hivebatch\b", f'DATABASE "{database}"', text)
    text = re.sub(r"FOR ROLE hivebatch\b", f'FOR ROLE "{owner}"', text)
    return [s.strip() for s in text.split(";") if s.strip()]


@pytest.fixture
def ledger(pg_url: str) -> Iterator[tuple[str, str]]:
    """(owner URL, reader URL) of a fresh migrated ledger, the reader set up by the page's SQL."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from hivebatch.db import make_engine, migrate

    base = make_url(pg_url).set(drivername="postgresql+psycopg")
    name, role = f"hbdoc_{uuid.uuid4().hex[:8]}", f"hbro_{uuid.uuid4().hex[:8]}"
    # the page's SQL runs as the PostgreSQL superuser (the lab's trusts loopback)
    superuser = base.set(username="postgres", password=None)
    admin = make_engine(superuser.render_as_string(hide_password=False)).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" OWNER "{base.username}"'))
    owner_url = base.set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(make_engine(owner_url))
    page_db = make_engine(superuser.set(database=name).render_as_string(hide_password=False))
    with page_db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for statement in page_sql(name, str(base.username), role):
            conn.execute(text(statement.replace("'change-me'", "'docs-test'")))
    page_db.dispose()
    reader = base.set(database=name, username=role, password="docs-test").render_as_string(
        hide_password=False
    )
    try:
        yield owner_url, reader
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def test_login_nodes_read_through_the_read_only_role(ledger: tuple[str, str], slurm_lab) -> None:  # type: ignore[no-untyped-def]
    import datetime as dt

    from sqlalchemy import text
    from sqlalchemy.exc import ProgrammingError
    from sqlalchemy.orm import Session

    from hivebatch.db import make_engine
    from hivebatch.db.models import Job

    owner_url, reader_url = ledger
    owner = make_engine(owner_url)
    with Session(owner) as s:
        s.add(Job(slurm_job_id=999_001, name="doc", user="alice", account="cv", vc_name="cv", qos="normal",
                  gpus=1, state="queued", reason="waiting for the docs test", submit_time=dt.datetime(2026, 1, 1)))  # fmt: skip
        s.commit()
    owner.dispose()

    env = {**os.environ, "HIVEBATCH_DATABASE_URL": reader_url,
           "HIVEBATCH_CONFIG": str(PROJECT / "etc" / "hivebatch.example.yaml")}  # fmt: skip
    proc = subprocess.run([str(PROJECT / ".venv" / "bin" / "hq"), "--json"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    row = next(r for r in json.loads(proc.stdout) if r["job_id"] == 999_001)
    assert row["reason"] == "waiting for the docs test"

    reader = make_engine(reader_url)
    with reader.connect() as conn, pytest.raises(ProgrammingError, match="permission denied"):
        conn.execute(text("DELETE FROM jobs"))
    reader.dispose()
