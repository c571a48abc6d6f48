"""``hivebatch db upgrade|downgrade|current``: create and migrate the ledger named by ``database.url``."""

from __future__ import annotations

import click

from hivebatch.cli.common import config_option
from hivebatch.config import load_config
from hivebatch.errors import HivebatchError


def _engine(config: str | None):  # type: ignore[no-untyped-def]
    from hivebatch.db.session import database_url, make_engine

    path, data = load_config(config)
    url = database_url(path, data)
    return url, make_engine(url)


def _describe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@click.group()
def db() -> None:
    """Create, migrate and inspect the hivebatch database (database.url in the config)."""


@db.command()
@config_option
@click.argument("revision", default="head")
def upgrade(config: str | None, revision: str) -> None:
    """Migrate the database up to REVISION (default: the newest); creates it when missing."""
    from hivebatch.db import migrate

    url, engine = _engine(config)
    try:
        migrate.upgrade(engine, revision)
        click.echo(f"database {_describe(url)} at revision {migrate.current_revision(engine)}")
    except Exception as exc:  # alembic/SQLAlchemy errors: one line, no traceback
        raise HivebatchError(f"upgrade of {_describe(url)} failed: {_one_line(exc)}") from None
    finally:
        engine.dispose()


@db.command()
@config_option
@click.argument("revision")
def downgrade(config: str | None, revision: str) -> None:
    """Migrate the database down to REVISION (`base` drops every hivebatch table)."""
    from hivebatch.db import migrate

    url, engine = _engine(config)
    try:
        migrate.downgrade(engine, revision)
        click.echo(
            f"database {_describe(url)} at revision {migrate.current_revision(engine) or 'base (empty)'}"
        )
    except Exception as exc:
        raise HivebatchError(f"downgrade of {_describe(url)} failed: {_one_line(exc)}") from None
    finally:
        engine.dispose()


@db.command()
@config_option
def current(config: str | None) -> None:
    """Print the database's revision and the newest one this hivebatch ships."""
    from hivebatch.db import migrate

    url, engine = _engine(config)
    try:
        rev = migrate.current_revision(engine)
    except Exception as exc:
        raise HivebatchError(f"cannot read {_describe(url)}: {_one_line(exc)}") from None
    finally:
        engine.dispose()
    head = migrate.head_revision()
    state = "up to date" if rev == head else "needs `hivebatch db upgrade`"
    click.echo(f"database {_describe(url)}: revision {rev or 'none (empty)'}, newest {head} ({state})")


def _one_line(exc: Exception) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
