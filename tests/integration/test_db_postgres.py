"""The ledger on a real PostgreSQL: migrations up and down, models, concurrent read-only readers.

Uses $HIVEBATCH_TEST_PG_URL (scripts/test starts a server); each test gets its own fresh database.
"""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select
from sqlalchemy.exc import InternalError, OperationalError, ProgrammingError

from hivebatch.db import Base, Event, Job, make_engine, make_sessionmaker, migrate

pytestmark = pytest.mark.integration


def test_upgrade_downgrade_on_postgres(pg_database: str) -> None:
    engine = make_engine(pg_database)
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    migrate.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    migrate.upgrade(engine)
    assert "jobs" in inspect(engine).get_table_names()
    engine.dispose()


def test_models_and_read_only_reader_on_postgres(pg_database: str) -> None:
    engine = make_engine(pg_database)
    migrate.upgrade(engine)
    factory = make_sessionmaker(engine)
    with factory() as s:
        job = Job(
            slurm_job_id=2**40,
            user="alice",
            vc_name="cv",
            gpus=2,
            placement={"node2": [3, 5]},
            state="running",
        )
        s.add(job)
        s.flush()
        s.add(
            Event(job_id=job.id, slurm_job_id=job.slurm_job_id, kind="placed", message="x", data={"a": [1]})
        )
        s.commit()
    reader = make_engine(pg_database, read_only=True)
    with make_sessionmaker(reader)() as r:
        got = r.scalars(select(Job)).one()
        assert got.placement == {"node2": [3, 5]} and got.slurm_job_id == 2**40
        assert [e.kind for e in got.events] == ["placed"]
        r.add(Job(slurm_job_id=1, gpus=1))
        with pytest.raises((InternalError, OperationalError, ProgrammingError)):
            r.flush()  # default_transaction_read_only: readers cannot write
    reader.dispose()
    engine.dispose()
