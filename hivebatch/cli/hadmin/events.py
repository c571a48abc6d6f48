"""``hadmin events``: the controller's audit trail — every placement, preemption, start and finish."""

from __future__ import annotations

import json

import click

from hivebatch.cli.common import config_option
from hivebatch.errors import HivebatchError

DEFAULT_LIMIT = 50


@click.command()
@config_option
@click.option("--job", "job", metavar="ID", help="only events of this Slurm job id")
@click.option("--since", "since_text", metavar="DATE",
              help="only events from then on: YYYY-MM-DD[THH:MM] (UTC) or a span back like 2h, 1d")  # fmt: skip
@click.option("--kind", "kinds", metavar="KIND", multiple=True,
              help="only events of this kind (placed, started, preempted, finished, waiting, node_bad, …); repeatable")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help=f"at most this many, the newest (default {DEFAULT_LIMIT} unless --job or --since is given)")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="output format")  # fmt: skip
def events(
    config: str | None,
    job: str | None,
    since_text: str | None,
    kinds: tuple[str, ...],
    limit: int | None,
    fmt: str,
) -> None:
    """Show the audit trail of controller decisions, oldest first."""
    from hivebatch.config import load_config
    from hivebatch.db.session import read_only_session
    from hivebatch.reports.render import events_csv, events_dicts, events_table
    from hivebatch.reports.source import load_events
    from hivebatch.reports.tables import print_tables
    from hivebatch.reports.timeutil import parse_since

    since = parse_since(since_text) if since_text else None
    if limit is None and job is None and since is None:
        limit = DEFAULT_LIMIT
    path, data = load_config(config)
    with read_only_session(path, data) as session:
        if session is None:
            raise HivebatchError(
                "no hivebatch database yet: run `hivebatch db upgrade` and the controller first"
            )
        from sqlalchemy.exc import SQLAlchemyError

        from hivebatch.reports.load import db_error

        try:
            rows = load_events(session, job=job, since=since, kinds=list(kinds) or None, limit=limit)
        except SQLAlchemyError as exc:
            raise HivebatchError(db_error(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(events_dicts(rows), indent=2))
    elif fmt == "csv":
        click.echo(events_csv(rows), nl=False)
    elif not rows:
        click.echo(
            "no events" + (f" for job {job}" if job else "") + (f" since {since_text}" if since_text else "")
        )
    else:
        print_tables([events_table(rows)])
