"""Alembic, driven from Python: ``hivebatch db upgrade|downgrade|current`` and the tests use this.

The migration scripts ship inside the package (``hivebatch/migrations/``), so a wheel install can
create and upgrade its database.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from hivebatch.errors import HivebatchError

MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"


def alembic_config(engine: Engine | None = None, url: str | None = None) -> Config:
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise HivebatchError(f"the migrations directory {MIGRATIONS_DIR} is missing: reinstall hivebatch")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if engine is not None:
        cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    command.downgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
