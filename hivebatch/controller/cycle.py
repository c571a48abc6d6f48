"""One controller cycle: observe → reconcile → decide → act → record, one transaction per step."""

from __future__ import annotations

import datetime as dt
import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from hivebatch.cells import ClusterSpec
from hivebatch.controller import refusals
from hivebatch.controller.act import act, write_intents
from hivebatch.controller.avoid import load_avoided
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide import Decisions, Wait, decide
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.node_sizes import node_figures, node_sizes, node_sizes_lua
from hivebatch.controller.observe import Observation, observe
from hivebatch.controller.reconcile import rebuild_allocator, sync_jobs
from hivebatch.controller.reconcile.usage import recent_usage
from hivebatch.controller.record import Recorder, set_state, write_gpu_map
from hivebatch.controller.tell import tell_clients
from hivebatch.controller.usage import usage_lua, write_usage
from hivebatch.db.models import Job, VCCell, VirtualCluster
from hivebatch.errors import HivebatchError
from hivebatch.reports.rows import cells_text
from hivebatch.reports.source import ledger_strict_usage
from hivebatch.slurm.base import SlurmBackend
from hivebatch.state.shares import get_state, gpu_capacity_by_node
from hivebatch.userlimits import HOLDING_STATES, with_holding

log = logging.getLogger("hivebatch.controller")


@dataclass
class CycleReport:
    started: dt.datetime
    seconds: float = 0.0
    observe_s: float = 0.0
    jobs_seen: int = 0
    placed: int = 0
    preempted: int = 0
    waiting: int = 0
    rejected: int = 0
    running: int = 0
    events: int = 0
    failures: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        return (
            f"cycle done in {self.seconds:.2f} s: {self.jobs_seen} Slurm jobs, {self.placed} placed, "
            f"{self.preempted} preempted, {self.running} running, {self.waiting} waiting, "
            f"{self.rejected} rejected, {self.events} events"
            + (f", {len(self.failures)} failed actions" if self.failures else "")
        )


def _cells_text(cells: dict[str, int], gpus: int) -> str:
    return f"{cells_text(dict(sorted(cells.items())))} ({gpus} GPUs)"


def sync_vcs(session: Session, spec: ClusterSpec, rec: Recorder) -> None:
    """Mirror the config's VCs and their cells into the ledger (readers show them without the config).
    A change after the first mirror is an event: the audit trail says when a VC grew or shrank, which
    is why some of its jobs were preempted."""
    rows = {v.name: v for v in session.scalars(select(VirtualCluster))}
    first = not rows
    now = rec.now
    for name, vc in spec.vcs.items():
        row = rows.pop(name, None)
        cells = dict(vc.cells)
        gpus = int(spec.vc_gpus(name))
        if row is None:
            row = VirtualCluster(name=name, gpus=gpus, updated_at=now)
            row.cells = [VCCell(cell_type=t, count=int(c)) for t, c in sorted(cells.items())]
            session.add(row)
            if not first:
                new = _cells_text(cells, gpus)
                rec.event(session, None, "vc_added", f"VC {name} added: {new}", {"vc": name, "cells": cells})
            continue
        have = {c.cell_type: c for c in row.cells}
        counts = {t: c.count for t, c in have.items()}
        if counts != cells or row.gpus != gpus:
            old = _cells_text(counts, row.gpus)
            rec.event(
                session,
                None,
                "vc_changed",
                f"VC {name}'s cells changed: {old} -> {_cells_text(cells, gpus)}",
                {"vc": name, "cells": cells},
            )
            row.gpus = gpus
            row.updated_at = now
            # in place: a replaced list would insert a type's new row before deleting its old one
            for t, cell in have.items():
                if t not in cells:
                    row.cells.remove(cell)
                else:
                    cell.count = int(cells[t])
            row.cells.extend(
                VCCell(cell_type=t, count=int(c)) for t, c in sorted(cells.items()) if t not in have
            )
    for row in rows.values():
        gone = _cells_text({c.cell_type: c.count for c in row.cells}, row.gpus)
        rec.event(
            session,
            None,
            "vc_removed",
            f"VC {row.name} removed from the config: it held {gone}",
            {"vc": row.name},
        )
        session.delete(row)


PREDICTION_TOLERANCE_S = 300.0
# a start due in two minutes that moved by one is worth the write: the student is about to look
NEAR_TOLERANCE_S = 30.0


def _tolerance(now: dt.datetime, *starts: dt.datetime | None) -> float:
    """How far a prediction may move before it is rewritten: a tenth of the time left until the
    nearer of the old and the new start, within 30 s .. 5 min. A start that was and stays in the past
    reads "now" in hq either way: the widest, or a job waiting "now" would be rewritten every cycle."""
    ahead = [(s - now).total_seconds() for s in starts if s is not None and s > now]
    if not ahead:
        return PREDICTION_TOLERANCE_S
    return min(PREDICTION_TOLERANCE_S, max(NEAR_TOLERANCE_S, min(ahead) / 10))


def _moved(
    old: dt.datetime | float | None,
    value: dt.datetime | float | None,
    tolerance: float = PREDICTION_TOLERANCE_S,
) -> bool:
    if old is None or value is None:
        return (old is None) != (value is None)
    if isinstance(value, dt.datetime) and isinstance(old, dt.datetime):
        delta = (value - old).total_seconds()
    elif isinstance(value, float | int) and isinstance(old, float | int):
        delta = float(value - old)
    else:
        return True
    return abs(delta) > tolerance


def _set_moved(job: Job, attr: str, value: dt.datetime | float | None) -> None:
    if _moved(getattr(job, attr), value):
        setattr(job, attr, value)


def _set_prediction(job: Job, w: Wait, now: dt.datetime) -> None:
    """A waiting job's predicted start, end and slack, all three when one moved noticeably: kept apart,
    a start that stayed within the tolerance beside an end that moved would show a run of another length.
    Noticeably is less the nearer the start: a start minutes away that stayed put while the job's
    reservation moved it would show "now" in hq until the job starts."""
    new = (w.predicted_start, w.predicted_end, w.slack_s)
    old = (job.predicted_start, job.predicted_end, job.slack_s)
    tol = _tolerance(now, job.predicted_start, w.predicted_start)
    if any(_moved(o, v, tol) for o, v in zip(old, new, strict=True)):
        job.predicted_start, job.predicted_end, job.slack_s = new


def _show_running_refusals(jobs: dict[int, Job], refused: dict[int, str]) -> None:
    """A running job has no waiting reason: a refusal of its owner's update in the last hour is its reason
    (hq's WHY), since scontrol said only "Access/permission denied". A reason of the controller's own
    (a job Slurm no longer lists, kept as it is) stays."""
    for sid, job in jobs.items():
        if job.state != "running":
            continue
        ours = job.reason is None or refusals.is_refusal(job.reason)
        if ours and job.reason != (want := refused.get(sid)):
            job.reason = want


def _apply_waits(
    session: Session, rec: Recorder, waits: list[Wait], now: dt.datetime, refused: dict[int, str]
) -> list[Wait]:
    """Write reasons and predictions of waiting jobs; an event (and log line) only when the reason changes.
    A refusal of the owner's update in the last hour ends the reason (``refused``, by Slurm job id).
    Returns the waits worth telling the job's client: a job's first reason to wait, and a rejection."""
    news: list[Wait] = []
    for w in waits:
        job = w.job
        w.reason = refusals.with_refusal(w.reason, refused.get(job.slurm_job_id))
        new_state = "rejected" if w.rejected else ("preempted" if job.state == "preempted" else "queued")
        changed = job.reason != w.reason or job.state != new_state
        first = job.reason is None
        # assign only what differs: an assignment alone makes the row dirty and costs a flush check
        if changed:
            job.state = new_state
            job.reason = w.reason
        if w.shape is not None and (job.shape_nodes, job.shape_gpn) != w.shape:
            job.shape_nodes, job.shape_gpn = w.shape
        # predictions are rewritten only when they move noticeably: 10,000 waiting jobs need not be
        # rewritten every minute just because time passed
        _set_prediction(job, w, now)
        if w.latency_s is not None and job.latency_s != w.latency_s:
            job.latency_s = w.latency_s
        if w.ect is not None:
            _set_moved(job, "expected_completion", w.ect)
        if changed:
            rec.event(session, job, "rejected" if w.rejected else "waiting", w.reason)
            if w.rejected or first:
                news.append(w)
    return news


def _check_empty_answer(session: Session, obs: Observation, backend: SlurmBackend) -> None:
    """No job at all where the previous cycle saw some is believed only when slurmctld answers a ping."""
    seen = get_state(session, "slurm_jobs_seen")
    if not obs.jobs and isinstance(seen, int) and seen > 0:
        backend.ping()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a cycle runs, and one full collection after it.

    A cycle at 10,000 waiting jobs makes a few hundred thousand objects (a ledger row and a Slurm record
    per job, the round's plans); the collector's passes over them, triggered by allocation counts,
    took about a quarter of the cycle. One collection at the end (~0.2 s there) frees the cycle's
    cyclic garbage, so a loop's memory does not grow. A caller that turned the collector off keeps
    it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def run_cycle(
    ctx: ControllerContext,
    session_factory: sessionmaker[Session],
    backend: SlurmBackend,
    guard: Callable[[], None] | None = None,
) -> CycleReport:
    """Run one full cycle. Raises HivebatchError (or SlurmError) when Slurm or the DB cannot be used.

    ``guard`` runs before anything is decided or sent to Slurm (the lease's renewal: a controller
    that lost its lease stops there). Its timings include the garbage collection after it."""
    t0 = time.perf_counter()
    with collector_paused():
        report = _cycle(ctx, session_factory, backend, guard, t0)
    report.timings["collect"] = time.perf_counter() - t0 - report.seconds
    report.seconds = time.perf_counter() - t0
    return report


def _cycle(
    ctx: ControllerContext,
    session_factory: sessionmaker[Session],
    backend: SlurmBackend,
    guard: Callable[[], None] | None,
    t0: float,
) -> CycleReport:
    obs = observe(backend)
    report = CycleReport(started=obs.now, observe_s=obs.seconds, jobs_seen=len(obs.jobs))
    rec = Recorder(obs.now)
    marks: dict[str, float] = {"observe": obs.seconds}

    def mark(name: str, since: float) -> float:
        now = time.perf_counter()
        marks[name] = now - since
        return now

    t = time.perf_counter()
    with session_factory() as session:
        _check_empty_answer(session, obs, backend)
        # GPU-hours of a slice are its share of the GPU's memory (record.account_run reads this)
        session.info["gpu_capacity_mib"] = gpu_capacity_by_node(ctx.spec)
        # reconcile (one transaction)
        sync_vcs(session, ctx.spec, rec)
        notes = refusals.read(session, ctx.refusals_path, obs.now)
        ledger = sync_jobs(session, obs, rec, backend, notes)
        refusals.record(session, rec, notes, ledger.jobs)
        rebuild_allocator(session, rec, ledger, obs, ctx.spec, ctx.data)
        ledger.avoided = load_avoided(session, obs.now, ledger.jobs)
        half_life = ctx.settings.fairshare_half_life_s
        ledger.usage = recent_usage(session, obs.now, half_life) if half_life else None
        session.commit()
        if not ctx.user_limits.empty:
            ledger.strict_use = ledger_strict_usage(session, obs.now)
        t = mark("reconcile", t)

        if guard is not None:
            guard()
        # decide; its intents and the waiting reasons are one transaction
        decisions: Decisions = decide(ctx, ledger, obs.now)
        t = mark("decide", t)
        write_intents(session, decisions, ledger.jobs, obs.now, ledger.slurm)
        # the refusals this controller reads (it serves slurmctld), none where it reads none
        refused = refusals.recent(session, obs.now) if ctx.refusals_path is not None else {}
        news = _apply_waits(session, rec, decisions.waits, obs.now, refused)
        _show_running_refusals(ledger.jobs, refused)
        session.commit()
        tell_clients(backend, news, ledger.slurm)
        t = mark("intents", t)

        # act: one transaction per Slurm action
        result = act(
            session_factory,
            session,
            rec,
            backend,
            decisions,
            ledger.jobs,
            ledger.redo_preempt,
            ledger.redo_place,
            ledger.redo_notice,
            ledger.slurm,
        )
        t = mark("act", t)

        # record: the GPU map for readers, the cycle's facts
        _record(session, ctx, ledger, obs, time.perf_counter() - t0)
        mark("record", t)

        report.placed = result.placed
        report.preempted = result.preempted
        report.failures = result.failed
        report.waiting = sum(1 for w in decisions.waits if not w.rejected)
        report.rejected = sum(1 for w in decisions.waits if w.rejected)
        report.running = sum(1 for j in ledger.jobs.values() if j.state == "running")
    report.events = sum(rec.counts.values())
    report.seconds = time.perf_counter() - t0
    report.timings = marks
    return report


def _record(
    session: Session, ctx: ControllerContext, ledger: Ledger, obs: Observation, seconds: float
) -> None:
    write_gpu_map(session, ledger.cells, ctx.spec, obs.now)
    if ledger.sharing is not None:
        # shared GPUs and their slices, for hadmin cluster (rebuilt from the jobs each cycle)
        set_state(session, "sharing", ledger.sharing.snapshot(), obs.now)
    set_state(session, "slurm_jobs_seen", len(obs.jobs), obs.now)
    if ctx.usage_path is not None:
        _write_usage_file(ctx.usage_path, ledger, obs.now)
    if ctx.nodes_path is not None and obs.nodes:
        nodes = node_figures(obs.nodes.values(), {n.name: n.gpu_type for n in ctx.spec.nodes})
        text = node_sizes_lua(node_sizes(nodes), obs.now, nodes, ctx.plugin_site)
        _write_plugin_file(ctx.nodes_path, text, "node sizes")
    set_state(
        session,
        "last_cycle",
        {"at": obs.now.isoformat(timespec="seconds"), "seconds": round(seconds, 3)},
        obs.now,
    )
    session.commit()


def _write_usage_file(path: Path, ledger: Ledger, now: dt.datetime) -> None:
    """The job_submit plugin's view of the strict classes: the GPU-hours read before decide (the
    ledger is read once a cycle), the jobs holding GPUs after this cycle's placements. A failure is
    logged, not fatal: the plugin stops checking limits at submit once the file is stale, and
    placement still checks them."""
    holding = [
        (j.user or "", j.vc_name or j.account or "", j.qos or "")
        for j in ledger.jobs.values()
        if not j.foreign and j.priority >= 0 and j.state in HOLDING_STATES
    ]
    _write_plugin_file(path, usage_lua(with_holding(ledger.strict_use, holding), now), "usage")


#: files this process could not write at its last try: their failure was logged once already
_UNWRITABLE: set[Path] = set()


def _write_plugin_file(path: Path, text: str, what: str) -> None:
    """Replace a file the job_submit plugin reads. A failure is logged once until a write succeeds
    again, not each cycle: the plugin stops trusting the file once it is stale, and the controller
    checks the same things again at placement."""
    try:
        write_usage(path, text)
    except OSError as exc:
        level = logging.DEBUG if path in _UNWRITABLE else logging.WARNING
        _UNWRITABLE.add(path)
        log.log(
            level,
            "cannot write the %s file %s for the job_submit plugin: %s",
            what,
            path,
            exc.strerror or exc,
        )
    else:
        _UNWRITABLE.discard(path)


def check_database(engine: Engine) -> None:
    from hivebatch.db.session import check_connection, schema_is_current

    check_connection(engine)
    if not schema_is_current(engine):
        raise HivebatchError("the database schema is not up to date: run `hivebatch db upgrade` first")
