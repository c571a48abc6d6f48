"""``hivebatch controller run --once | --loop [--interval S]``: the cron-friendly controller entry point."""

from __future__ import annotations

import logging
import sys
import time

import click

from hivebatch.cli.common import FiniteFloat, config_option
from hivebatch.errors import HivebatchError

log = logging.getLogger("hivebatch.controller")


def _setup_logging(quiet: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    fmt = logging.Formatter("%(asctime)s controller %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
    fmt.converter = time.gmtime
    handler.setFormatter(fmt)
    log.handlers[:] = [handler]
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    log.propagate = False


@click.group()
def controller() -> None:
    """Run the hivebatch controller (the only writer of the database; run it from cron or systemd)."""


@controller.command()
@click.option("--once", "mode", flag_value="once", default=True, help="Run one cycle and exit (for cron).")
@click.option("--loop", "mode", flag_value="loop", help="Run cycles until stopped.")
@click.option(
    "--interval",
    type=FiniteFloat(min=0.1),
    default=None,
    metavar="S",
    help="Seconds between cycles with --loop (default: controller.interval_s, 60).",
)
@config_option
@click.option("-q", "--quiet", is_flag=True, help="Log only problems, not every decision.")
def run(mode: str, interval: float | None, config: str | None, quiet: bool) -> None:
    """Observe Slurm, reconcile the database, place held jobs on their cells, preempt, record.

    One controller per database: a second one exits at once with status 1, naming the holder.
    Status 1 also when Slurm or the database cannot be used; --loop retries with back-off instead.
    """
    from sqlalchemy.exc import OperationalError

    from hivebatch.controller import ControllerLease
    from hivebatch.controller.context import load_context
    from hivebatch.controller.cycle import check_database
    from hivebatch.controller.lease import lease_ttl
    from hivebatch.controller.runner import one_line, run_loop, run_once
    from hivebatch.db.session import open_database
    from hivebatch.slurm import get_backend

    _setup_logging(quiet)
    if interval is not None and mode != "loop":
        raise click.UsageError("--interval only makes sense with --loop")
    ctx = load_context(config, publish=True)
    pause = interval if interval is not None else ctx.settings.interval_s
    engine, factory = open_database(ctx.config_path, ctx.data)
    check_database(engine)
    lease = ControllerLease(engine, lease_ttl(pause))
    try:
        lease.acquire()
    except OperationalError as exc:
        raise HivebatchError(one_line(exc)) from None
    try:
        backend = get_backend()
        if mode == "loop":
            run_loop(ctx, factory, backend, lease, pause)
            return
        report = run_once(ctx, factory, backend, lease)
        (log.warning if report.failures else log.info)(report.summary())
        for failure in report.failures:
            click.echo(f"error: {failure}", err=True)
        if report.failures:
            sys.exit(1)
    except KeyboardInterrupt:
        log.info("stopped")
    finally:
        try:
            lease.release()
        except OperationalError as exc:  # left behind, it is taken over: its pid is gone
            log.error("could not give the controller lease back: %s", one_line(exc))
