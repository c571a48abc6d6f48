"""The reports read a PostgreSQL ledger exactly as they read SQLite: same scripted day, same figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
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


def _figures(engine: object) -> tuple[dict[str, object], list[dict[str, object]], int, int, set[str]]:
    with Session(engine) as session:  # type: ignore[call-overload]
        jobs, segments = load_jobs(session)
        slots, _taken = load_slots(session)
        events = load_events(session, job="108")
        now = load_vc_now(session, config_data())
    quota = quota_report(jobs, segments, vc_infos(config_data()), utc(0), utc(10), total_gpus=32, now=now)
    users = users_report(jobs, segments, utc(0), utc(10), {"V100": 8})
    return quota_dict(quota), users_dicts(users), len(slots), len(events), {v.vc for v in now.values()}


def test_postgres_ledger_gives_the_sqlite_figures(pg_database: str, tmp_path: Path) -> None:
    pg = make_engine(pg_database)
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
