"""Alembic environment for hivebatch: the engine comes from the caller, a -x url=..., or the config."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from hivebatch.db.models import Base

config = context.config
target_metadata = Base.metadata


def _engine():  # type: ignore[no-untyped-def]
    engine = config.attributes.get("engine")
    if engine is not None:
        return engine
    from hivebatch.config import load_config
    from hivebatch.db.session import database_url, make_engine

    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        path, data = load_config()
        url = database_url(path, data)
    return make_engine(url)


def run_migrations_offline() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    if config.config_file_name is not None and config.attributes.get("engine") is None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    with _engine().connect() as connection:
        # render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
