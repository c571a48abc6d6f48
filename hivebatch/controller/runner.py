"""Running cycles under the database lease: once (cron, a systemd timer) or in a loop (a service).

A loop never ends because one cycle failed, whatever the exception: Slurm, the database or one
job may be fine again by the next cycle. After a failure it waits longer each time (doubling, up
to BACKOFF_CAP_S) so an outage is not hammered, and returns to its interval after a good cycle.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from hivebatch.controller.context import ControllerContext
from hivebatch.controller.cycle import CycleReport, run_cycle
from hivebatch.controller.lease import ControllerLease, LeaseLost
from hivebatch.errors import HivebatchError
from hivebatch.slurm.base import SlurmBackend

log = logging.getLogger("hivebatch.controller")

BACKOFF_CAP_S = 300.0


def one_line(exc: BaseException) -> str:
    """An exception in one line for the log: a database error by its driver's message."""
    if isinstance(exc, OperationalError):
        return f"database error: {str(exc.orig or exc).strip().splitlines()[0]}"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def backoff(pause_s: float, failures: int) -> float:
    """Seconds to wait after ``failures`` failed cycles in a row (0: the normal interval)."""
    if failures <= 0:
        return pause_s
    return float(min(pause_s * 2 ** (failures - 1), max(pause_s, BACKOFF_CAP_S)))


def run_once(
    ctx: ControllerContext, factory: sessionmaker[Session], backend: SlurmBackend, lease: ControllerLease
) -> CycleReport:
    """One cycle; raises HivebatchError (one line) when it could not be done."""
    try:
        return run_cycle(ctx, factory, backend, guard=lease.renew)
    except OperationalError as exc:
        raise HivebatchError(one_line(exc)) from None


def _stamp(ctx: ControllerContext) -> tuple[int, int] | None:
    """When and how big the config file was: a change means an admin's edit to read."""
    try:
        st = ctx.config_path.stat() if ctx.config_path is not None else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st is not None else None


def reread(ctx: ControllerContext) -> ControllerContext:
    """The config read again, as the timer's next run would read it (moved cells, new limits), or
    ``ctx`` when the file is unusable now, said in one line. The database stays the one the loop
    opened: a new ``database:`` takes a restart."""
    from hivebatch.controller.context import load_context

    try:
        new = load_context(ctx.config_path, publish=True)
    except HivebatchError as exc:
        log.error(
            "config %s changed but cannot be used (%s): going on with the one read before",
            ctx.config_path,
            exc,
        )
        return ctx
    if new.data.get("database") != ctx.data.get("database"):
        log.warning("config %s changed its database: restart the controller to use it", ctx.config_path)
    log.info("config %s read again", ctx.config_path)
    return new


def run_loop(
    ctx: ControllerContext,
    factory: sessionmaker[Session],
    backend: SlurmBackend,
    lease: ControllerLease,
    pause_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    cycles: int | None = None,
) -> None:
    """Cycles every ``pause_s`` until stopped (or ``cycles`` done). Raises only LeaseLost."""
    # what the process holds before its first cycle (modules, the config's cells) lives as long as it
    # does: the full collection after each cycle (cycle.collector_paused) need not walk it every time
    gc.collect()
    gc.freeze()
    failures = 0
    done = 0
    stamp = _stamp(ctx)
    while cycles is None or done < cycles:
        done += 1
        t0 = time.monotonic()
        if (now := _stamp(ctx)) != stamp and now is not None:
            stamp, ctx = now, reread(ctx)
        try:
            lease.renew()
            report = run_cycle(ctx, factory, backend, guard=lease.renew)
            (log.warning if report.failures else log.info)(report.summary())
            failures = 0
        except LeaseLost:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad cycle never stops the controller
            failures += 1
            log.error("cycle failed: %s; next try in %.0f s", one_line(exc), backoff(pause_s, failures))
        sleep(max(0.0, backoff(pause_s, failures) - (time.monotonic() - t0)))
