"""``hivebatch controller run --once | --loop [--interval S]``: the cron-friendly controller entry point."""

from __future__ import annotations

import logging
import sys
import time

import click

from hivebatch.cli.common import config_option
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
    type=click.FloatRange(min=0.1),
    default=None,
    metavar="S",
    help="Seconds between cycles with --loop (default: controller.interval_s, 60).",
)
@config_option
@click.option("-q", "--quiet", is_flag=True, help="Log only problems, not every decision.")
def run(mode: str, interval: float | None, config: str | None, quiet: bool) -> None:
    """Observe Slurm, reconcile the database, place held jobs on their cells, preempt, record.

    A second controller started while one runs exits at once with status 0.
    """
    from sqlalchemy.exc import OperationalError

    from hivebatch.controller import AlreadyRunning, ControllerLock, run_cycle
    from hivebatch.controller.context import load_context
    from hivebatch.controller.cycle import check_database
    from hivebatch.db.session import open_database
    from hivebatch.slurm import SlurmError, get_backend

    _setup_logging(quiet)
    if interval is not None and mode != "loop":
        raise click.UsageError("--interval only makes sense with --loop")
    ctx = load_context(config)
    lock = ControllerLock(ctx.settings.lock_file)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        click.echo(str(exc), err=True)
        return
    try:
        engine, factory = open_database(ctx.config_path, ctx.data)
        check_database(engine)
        backend = get_backend()
        if mode == "once":
            try:
                report = run_cycle(ctx, factory, backend)
            except OperationalError as exc:
                raise HivebatchError(f"database error: {str(exc.orig or exc).splitlines()[0]}") from None
            log.warning(report.summary()) if report.failures else log.info(report.summary())
            if report.failures:
                for failure in report.failures:
                    click.echo(f"error: {failure}", err=True)
                sys.exit(1)
            return
        pause = interval if interval is not None else ctx.settings.interval_s
        while True:
            t0 = time.monotonic()
            try:
                report = run_cycle(ctx, factory, backend)
                log.info(report.summary())
            except (SlurmError, HivebatchError, OperationalError) as exc:
                # keep looping: Slurm or the database may be back by the next cycle
                log.error("cycle failed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            time.sleep(max(0.0, pause - (time.monotonic() - t0)))
    except KeyboardInterrupt:
        log.info("stopped")
    finally:
        lock.release()
