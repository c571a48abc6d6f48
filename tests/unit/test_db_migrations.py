"""Alembic: upgrade from an empty SQLite database to the models, and back down to nothing."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import inspect

from hivebatch.cli.hivebatch.db import db
from hivebatch.db import Base, make_engine, migrate


def test_upgrade_from_empty_matches_the_models_and_downgrade_removes_everything(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/hb.db")
    assert migrate.current_revision(engine) is None
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    tables = set(inspect(engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"migrations and models differ: {diff}"
    migrate.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    migrate.upgrade(engine)  # and up again
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_db_commands(tmp_path: Path) -> None:
    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text("database: {url: 'sqlite:///var/hb.db'}\n")
    runner = CliRunner()
    env = {"HIVEBATCH_DATABASE_URL": ""}
    res = runner.invoke(db, ["current", "--config", str(cfg)], env=env)
    assert res.exit_code == 0 and "needs `hivebatch db upgrade`" in res.output
    res = runner.invoke(db, ["upgrade", "--config", str(cfg)], env=env)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "var" / "hb.db").exists()
    res = runner.invoke(db, ["current", "--config", str(cfg)], env=env)
    assert "up to date" in res.output
    res = runner.invoke(db, ["downgrade", "base", "--config", str(cfg)], env=env)
    assert res.exit_code == 0 and "base (empty)" in res.output
