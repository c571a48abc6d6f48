"""The reports read a PostgreSQL ledger exactly as they read SQLite: same scripted day, same figures."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from report_scenario import config_data, fill, make_db, utc  # noqa: E402

from hivebatch.db import Base, make_engine  # noqa: E402
from hivebatch.reports.load import load_vc_now  # noqa: E402
from hivebatch.reports.render import quota_dict, users_dicts  # noqa: E402
from hivebatch.reports.source import load_events, load_jobs, load_slots  # noqa: E402
from hivebatch.reports.topology import vc_infos  # noqa: E402
from hivebatch.reports.usage import quota_report  # noqa: E402
from hivebatch.reports.users import users_report  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture()
def pg_url() -> Iterator[str]:
    url = os.environ.get("HIVEBATCH_TEST_PG_URL")
    if not url:
        pytest.fail(
            "HIVEBATCH_TEST_PG_URL is not set: start it with scripts/slurm-lab pg (scripts/test does)"
        )
    base = make_url(url).set(drivername="postgresql+psycopg")
    name = f"hbreport_{uuid.uuid4().hex[:10]}"
    admin = make_engine(base.render_as_string(hide_password=False)).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _figures(engine: object) -> tuple[dict[str, object], list[dict[str, object]], int, int, set[str]]:
    with Session(engine) as session:  # type: ignore[call-overload]
        jobs, segments = load_jobs(session)
        slots, _taken = load_slots(session)
        events = load_events(session, job="108")
        now = load_vc_now(session, config_data())
    quota = quota_report(jobs, segments, vc_infos(config_data()), utc(0), utc(10), total_gpus=32, now=now)
    users = users_report(jobs, segments, utc(0), utc(10), {"V100": 8})
    return quota_dict(quota), users_dicts(users), len(slots), len(events), {v.vc for v in now.values()}


def test_postgres_ledger_gives_the_sqlite_figures(pg_url: str, tmp_path: Path) -> None:
    pg = make_engine(pg_url)
    Base.metadata.create_all(pg)
    with Session(pg) as session:
        fill(session)
    sqlite = make_engine(make_db(tmp_path / "ledger.db"))
    try:
        on_pg, on_sqlite = _figures(pg), _figures(sqlite)
    finally:
        pg.dispose()
        sqlite.dispose()
    assert on_pg == on_sqlite
    quota = on_pg[0]
    assert quota["totals"]["gpu_hours_guaranteed"] == 183.0  # type: ignore[index]
    assert on_pg[2:] == (32, 5, {"cv", "nlp", "sys"})
