"""Submitting a replay plan to a live Slurm, in plain-Slurm mode or through the hivebatch controller.

Plain Slurm: the jobs go in as the Operator (the job_submit plugin passes an Operator's GPU jobs
untouched) into one temporary account per VC with ``GrpTRES=gres/gpu=N``, N = the VC's GPUs, so
Slurm's own priority and backfill place them within quotas. The accounts and the Operator's
associations with them are deleted afterwards: accounting changes are persistent.

hivebatch: the jobs go in as each VC's user into the VC's account; the plugin holds them and the
controller (``run_cycle``, a fresh SQLite ledger in a temporary directory unless kept) places them, one cycle
every ``interval_s``. It sees only the replay's pending jobs, so stray jobs on the cluster are left
alone, but it does see everything running.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hivebatch.errors import HivebatchError
from hivebatch.notice import parse_notice
from hivebatch.replay.latency import JobTimes, latency_lines
from hivebatch.replay.measure import job_name
from hivebatch.replay.plan import Plan, PlannedJob
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.cli import CliBackend, subprocess_runner
from hivebatch.slurm.parse import requeue_delay_s
from hivebatch.slurm.types import FINISHED_STATES, AcctRecord, SlurmJob, SlurmUnavailable

PLAIN_ACCOUNT_PREFIX = "hbreplay_"
POLL_S = 0.1  # the replay loop's longest sleep, real seconds
SCRIPT = "#!/bin/sh\nsleep {sleep}\n"


@dataclass
class LiveSettings:
    operator: str  # an Operator of the cluster's accounting: the controller's user
    users: dict[str, str]  # VC -> a user of its account (hivebatch mode)
    classes: list[str]  # the QOS names of the job classes
    interval_s: float = 2.0  # controller cycle period, real seconds
    timeout_s: float = 1800.0  # a replay not finished by then is cancelled
    keep: Path | None = None  # a new directory to keep the hivebatch run's ledger and config in
    log: Callable[[str], None] = field(default=lambda _m: None)


class ScopedBackend:
    """A backend showing the controller only the pending jobs in ``mine`` (and everything running)."""

    def __init__(self, inner: SlurmBackend, mine: set[int]) -> None:
        self.inner, self.mine = inner, mine

    def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
        jobs = self.inner.list_jobs(job_ids)
        # an array's tasks split off later get job ids of their own: they belong to the scope too
        return [
            j
            for j in jobs
            if j.job_id in self.mine or j.array_job_id in self.mine or j.state in ("RUNNING", "COMPLETING")
        ]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def plain_account(vc: str) -> str:
    return f"{PLAIN_ACCOUNT_PREFIX}{vc}".lower()


def _sacctmgr(*args: str, check: bool = True) -> str:
    done = subprocess_runner(60.0)(["sacctmgr", "-i", *args], None, {})
    if check and done.returncode != 0:
        raise HivebatchError(f"sacctmgr {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


@contextmanager
def plain_accounts(vc_gpus: dict[str, int], settings: LiveSettings) -> Iterator[dict[str, str]]:
    """VC -> a temporary account limited to the VC's GPUs, the Operator associated with each."""
    made: dict[str, str] = {}
    qos = ",".join(settings.classes)
    try:
        for vc, gpus in sorted(vc_gpus.items()):
            acct = plain_account(vc)
            made[vc] = acct
            # a leftover of an interrupted run is reused: "Nothing new added" is not an error here
            _sacctmgr("add", "account", acct, f"Description=hivebatch replay of {vc}", check=False)
            _sacctmgr("modify", "account", "where", f"name={acct}", "set", f"GrpTRES=gres/gpu={gpus}",
                      f"QOS={qos}", f"DefaultQOS={settings.classes[-1]}", check=False)  # fmt: skip
            _sacctmgr("add", "user", settings.operator, f"Account={acct}", check=False)
            # the account's own association carries the limit; the Operator's is its child
            assoc = _sacctmgr("-n", "-P", "show", "assoc", "where", f"account={acct}", "format=User,GrpTRES")
            lines = assoc.splitlines()
            if f"|gres/gpu={gpus}" not in lines or not any(
                x.startswith(f"{settings.operator}|") for x in lines
            ):
                raise HivebatchError(
                    f"could not give {settings.operator} account {acct} with GrpTRES gres/gpu={gpus}"
                )
        settings.log(f"plain Slurm: accounts {', '.join(made.values())} with GrpTRES per VC")
        yield made
    finally:
        for acct in made.values():
            _sacctmgr("delete", "user", settings.operator, f"account={acct}", check=False)
            _sacctmgr("delete", "account", acct, check=False)


def submit_args(p: PlannedJob, account: str, mode: str) -> list[str]:
    """sbatch options of one replayed job: its trace shape as -N/--gres, its class as the QOS."""
    return [
        "-A", account, "-q", p.job.cls, "-J", job_name(mode, p.job.job_id), "-t", str(p.time_limit_min),
        f"--nodes={p.nodes}", f"--gres=gpu:{p.gpus_per_node}", "-o", "/dev/null", "--chdir=/tmp",
    ]  # fmt: skip


def run_plan(
    plan: Plan,
    mode: str,
    backends: Callable[[PlannedJob], tuple[SlurmBackend, str]],
    settings: LiveSettings,
    mine: set[int],
    tick: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Submit each job at its real arrival time, ``tick`` every interval, until every job has ended.

    ``backends(job)`` -> (the backend to submit with, the account); returns trace job id -> Slurm id."""
    pending = sorted(plan.jobs, key=lambda p: p.at_s)
    ids: dict[str, int] = {}
    watch = CliBackend()
    t0 = time.monotonic()
    due = 0.0  # the next cycle's start, on the fixed schedule ``next_cycle`` keeps
    last_poll = -1e9
    while True:
        now = time.monotonic() - t0
        if now > settings.timeout_s:
            raise HivebatchError(f"the {mode} replay did not finish within {settings.timeout_s:.0f} s")
        try:
            while pending and pending[0].at_s <= now:
                p = pending[0]
                backend, account = backends(p)
                jid = backend.submit(SCRIPT.format(sleep=f"{p.sleep_s:g}"), submit_args(p, account, mode))
                pending.pop(0)
                ids[p.job.job_id] = jid
                mine.add(jid)
            if tick is not None and now >= due:
                tick()
                due = next_cycle(due, settings.interval_s, time.monotonic() - t0)
            if not pending and now - last_poll >= 1.0:
                last_poll = now
                if all(j.state in FINISHED_STATES for j in watch.list_jobs(sorted(mine))):
                    return ids
        except SlurmUnavailable as exc:
            # slurmctld or munge away for a moment: what was not done is done on the next pass, as
            # the controller itself does; the waits it causes are measured like any other
            settings.log(f"{mode} replay: {exc}; retrying")
            time.sleep(1.0)
        time.sleep(_pause(time.monotonic() - t0, pending[0].at_s if pending else None, due if tick else None))


def next_cycle(due: float, interval_s: float, now: float) -> float:
    """When the cycle after one due at ``due`` starts, given it ended at ``now``: ``interval_s`` after
    the start it was due at, as ``controller run --loop`` keeps its period (and the simulator assumes),
    or at once when the cycle overran. Counting from when the cycle was noticed instead lets each
    cycle drift by the polling delay: 2.055 s instead of 2.0 s on the lab."""
    return max(due + interval_s, now)


def _pause(now: float, submit_at: float | None, cycle_at: float | None) -> float:
    """Sleep until the next submission or cycle is due, and never longer than the poll period."""
    nexts = [t - now for t in (submit_at, cycle_at) if t is not None]
    return max(0.0, min([POLL_S, *nexts]))


def cancel_all(ids: set[int]) -> None:
    backend = CliBackend()
    for jid in sorted(ids):
        with contextlib.suppress(HivebatchError):  # already gone
            backend.cancel(jid)


def accounting(ids: list[int], timeout_s: float = 60.0) -> list[AcctRecord]:
    """sacct rows of every run of ``ids`` (a preempted job has one per run, oldest first), once each
    job's latest has its end time (slurmdbd records ends a moment later)."""
    backend = CliBackend()
    deadline = time.monotonic() + timeout_s
    while True:
        rows = backend.history(ids, runs=True)
        latest = {r.job_id: r for r in rows}
        if len(latest) >= len(ids) and all(r.end_time is not None for r in latest.values()):
            return rows
        if time.monotonic() > deadline:
            return rows
        time.sleep(1.0)


def replay_plain(plan: Plan, vc_gpus: dict[str, int], settings: LiveSettings) -> list[AcctRecord]:
    mine: set[int] = set()
    operator = CliBackend(run_as=settings.operator)
    with plain_accounts(vc_gpus, settings) as accounts:
        try:
            run_plan(plan, "plain", lambda p: (operator, accounts[p.job.vc]), settings, mine)
        finally:
            cancel_all(mine)  # nothing of the replay may outlive it, or the accounts cannot go
            _wait_gone(mine)
    return accounting(sorted(mine))


def requeue_delay() -> tuple[int, str]:
    """Real seconds before a job hivebatch preempted may start again, and where that figure came from."""
    try:
        config = CliBackend().config()
    except HivebatchError as exc:
        return requeue_delay_s({}), f"Slurm's default; slurmctld did not answer: {exc}"
    source = f"slurmctld's AuthInfo {config.get('AuthInfo') or '(cred_expire default)'}"
    return requeue_delay_s(config), source


def compressed_notice(config_data: dict[str, Any], speedup: float) -> dict[str, Any]:
    """The config's ``preemption:`` notices in real seconds: a time like the others, compressed by the speedup."""
    ns = parse_notice(config_data)
    return {
        "notice_s": max(1, round(ns.notice_s / speedup)),
        "notice_s_by_class": {c: max(1, round(v / speedup)) for c, v in ns.by_class.items()},
    }


def replay_hivebatch(plan: Plan, config_data: dict[str, Any], settings: LiveSettings) -> list[AcctRecord]:
    from hivebatch.controller.context import load_context
    from hivebatch.controller.cycle import run_cycle
    from hivebatch.db import make_engine, make_sessionmaker, migrate

    missing = sorted({p.job.vc for p in plan.jobs} - set(settings.users))
    if missing:
        raise HivebatchError(f"no user for VC(s) {', '.join(missing)}: give --user VC=USER for each")
    mine: set[int] = set()
    with _workdir(settings.keep) as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        data = dict(config_data)
        data["database"] = {"url": url}
        data["controller"] = {
            **(config_data.get("controller") or {}),
            "interval_s": max(1, round(settings.interval_s)),
            "lock_file": str(Path(tmp) / "ctl.lock"),
        }
        data["preemption"] = compressed_notice(config_data, plan.spec.speedup)
        cfg = Path(tmp) / "hivebatch.yaml"
        cfg.write_text(yaml.safe_dump(data), encoding="utf-8")
        ctx = load_context(cfg, publish=True)
        engine = make_engine(url)
        migrate.upgrade(engine)
        factory = make_sessionmaker(engine)
        scoped: Any = ScopedBackend(CliBackend(run_as=settings.operator), mine)
        users = {vc: CliBackend(run_as=u) for vc, u in settings.users.items()}

        cycles_s: list[float] = []
        starts: list[float] = []

        def tick() -> None:
            starts.append(time.monotonic())
            report = run_cycle(ctx, factory, scoped)
            cycles_s.append(report.seconds)
            if not report.ok:
                settings.log(f"controller cycle: {report.failures}")

        try:
            run_plan(plan, "hivebatch", lambda p: (users[p.job.vc], p.job.vc), settings, mine, tick)
            for line in latency_lines(_job_times(factory), cycles_s, starts):
                settings.log(f"hivebatch: {line}")
        finally:
            cancel_all(mine)
            _wait_gone(mine)
            engine.dispose()
    return accounting(sorted(mine))


def _workdir(keep: Path | None) -> contextlib.AbstractContextManager[str]:
    """Where the hivebatch run's ledger and config live: ``keep`` (made now, left afterwards) or a temporary
    directory."""
    if keep is None:
        return tempfile.TemporaryDirectory(prefix="hbreplay-")
    keep.mkdir()
    return contextlib.nullcontext(str(keep))


def _job_times(factory: Any) -> list[JobTimes]:
    from sqlalchemy import func, select

    from hivebatch.db.models import Event, Job

    with factory() as session:
        first_placed = dict(
            session.execute(
                select(Event.slurm_job_id, func.min(Event.time))
                .where(Event.kind == "placed")
                .group_by(Event.slurm_job_id)
            ).all()
        )
        reasons: dict[int, list[str]] = {}
        for sid, message in session.execute(
            select(Event.slurm_job_id, Event.message).where(Event.kind == "waiting").order_by(Event.id)
        ):
            reasons.setdefault(sid, []).append(message)
        return [
            JobTimes(
                job.vc_name or "?",
                job.submit_time,
                first_placed.get(job.slurm_job_id),
                job.start_time,
                tuple(reasons.get(job.slurm_job_id, ())),
            )
            for job in session.scalars(select(Job).where(Job.submit_time.is_not(None)))
        ]


def _wait_gone(ids: set[int], timeout_s: float = 60.0) -> None:
    """Cancelled jobs hold their GPUs until Slurm has cleaned up: the next run must not see them."""
    backend = CliBackend()
    deadline = time.monotonic() + timeout_s
    while ids and time.monotonic() < deadline:
        if all(j.state in FINISHED_STATES for j in backend.list_jobs(sorted(ids))):
            return
        time.sleep(0.5)
