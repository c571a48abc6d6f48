"""A held job's ``--dependency``, judged from squeue as slurmctld judges it (job_scheduler.c,
``test_job_dependency``, Slurm 22.05).

slurmctld re-tests a held job's dependency only in its minute-long purge pass (``job_independent``
skips held jobs), so its text stays ``(unfulfilled)`` up to 60 s after the condition holds. Measured on
the lab (tests/fixtures/slurm/dependency_held_retest.txt): a job waiting for a whole array started 44 s
after the array ended, and the second of two ``singleton`` jobs 56 s after the first ended. Plain Slurm
starts them in its next scheduling pass, so the controller judges the condition itself from the
records squeue lists — the same records slurmctld judges by. A condition it cannot tell (a type it
does not judge, a job squeue no longer lists) is left to Slurm's own re-test.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Literal

from hivebatch.controller.decide.times import aware
from hivebatch.slurm.types import FINISHED_STATES, SlurmJob

Verdict = Literal["met", "never", "wait"]


class Listing:
    """The records squeue lists, by job id, with the look-ups a singleton or whole-array dependency
    makes indexed on first use: built once per cycle, so each dependent job reads only its own."""

    def __init__(self, jobs: Mapping[int, SlurmJob]) -> None:
        self.jobs = jobs
        self._arrays: dict[int, list[SlurmJob]] | None = None
        self._named: dict[tuple[str, str], list[SlurmJob]] | None = None

    def array(self, array_id: int) -> list[SlurmJob]:
        if self._arrays is None:
            self._arrays = {}
            for o in self.jobs.values():
                if o.array_job_id:
                    self._arrays.setdefault(o.array_job_id, []).append(o)
        return self._arrays.get(array_id, [])

    def named(self, user: str, name: str) -> list[SlurmJob]:
        if self._named is None:
            self._named = {}
            for o in self.jobs.values():
                self._named.setdefault((o.user, o.name), []).append(o)
        return self._named.get((user, name), [])


# states of a job that has not finished but no longer waits to start (a singleton's other job blocks in
# these; COMPLETING is over for Slurm's dependency tests, and any state not named here blocks)
_PENDING = "PENDING"
_ITEM = re.compile(r"^(?P<kind>[a-z]+)(?::(?P<targets>[^()]*))?(?:\((?P<state>[a-z]+)\))?$")


def judge(sj: SlurmJob, others: Mapping[int, SlurmJob] | Listing, now: dt.datetime) -> Verdict:
    """Whether ``sj``'s dependency is met, can never be met, or still waits.

    Conditions joined by ``,`` must all be met; by ``?``, any one suffices (Slurm's OR). ``others``:
    the records squeue lists (a ``Listing`` shared by the cycle's jobs saves indexing them per job).
    """
    text = sj.dependency.strip()
    if not text:
        return "met"
    if not isinstance(others, Listing):
        others = Listing(others)
    any_of = "?" in text
    verdicts: list[Verdict] = []
    for part in filter(None, re.split(r"[,?]", text)):
        verdicts.extend(_part(part, sj, others, now))
    if not verdicts:
        return "wait"
    if any_of:
        return "met" if "met" in verdicts else ("never" if all(v == "never" for v in verdicts) else "wait")
    return "never" if "never" in verdicts else ("met" if all(v == "met" for v in verdicts) else "wait")


def shown(dependency: str) -> str:
    """The dependency as the user wrote it, without Slurm's state words."""
    return re.sub(r"\((unfulfilled|failed|fulfilled)\)", "", dependency)


def _part(part: str, sj: SlurmJob, others: Listing, now: dt.datetime) -> list[Verdict]:
    m = _ITEM.match(part.strip())
    if m is None:
        return ["wait"]
    if m["state"] == "failed":
        return ["never"]
    if m["state"] == "fulfilled":
        return ["met"]
    if m["kind"] == "singleton":
        return [_singleton(sj, others)]
    targets = [t for t in (m["targets"] or "").split(":") if t]
    if m["kind"] == "aftercorr":
        return [_corresponding(sj, t, others) for t in targets] or ["wait"]
    return [_target(m["kind"], t, others, now) for t in targets] or ["wait"]


def _singleton(sj: SlurmJob, others: Listing) -> Verdict:
    """Met when no other job of the same user and name runs, or waits having been submitted first.

    An array's tasks are one job to it: Slurm judges the array's dependency once, and every task starts
    together when it is met (tests/fixtures/slurm/singleton_array.txt)."""
    if sj.job_id not in others.jobs:
        return "wait"  # not the listing the job was seen in: nothing to judge by
    for o in others.named(sj.user, sj.name):
        if o.job_id == sj.job_id or (sj.array_job_id and o.array_job_id == sj.array_job_id):
            continue
        if o.state in FINISHED_STATES or o.state == "COMPLETING":
            continue
        if o.state == _PENDING and o.job_id > sj.job_id:
            continue
        return "wait"
    return "met"


def _corresponding(sj: SlurmJob, target: str, others: Listing) -> Verdict:
    """``aftercorr``: the task of the other array with this task's index must complete successfully
    (Slurm writes the target as ``N_*``)."""
    base = target.partition("_")[0]
    if sj.array_task_id is None or not base.isdigit():
        return "wait"  # the array's pending remainder: Slurm splits its tasks off first
    tasks = [o for o in others.array(int(base)) if o.array_task_id == sj.array_task_id]
    if not tasks:
        return "wait"  # still in the other array's pending remainder, or gone from squeue
    task = tasks[0]
    if task.state not in FINISHED_STATES:
        return "wait"
    return "met" if task.state == "COMPLETED" else "never"


def _target(kind: str, target: str, others: Listing, now: dt.datetime) -> Verdict:
    job, _, minutes = target.partition("+")
    base, sep, task = job.partition("_")
    if not base.isdigit() or (minutes and not minutes.isdigit()):
        return "wait"
    if not sep:
        records = [others.jobs[int(base)]] if int(base) in others.jobs else []
    elif task == "*":  # the array as a whole: every record squeue still lists
        records = others.array(int(base))
    elif task.isdigit():
        records = [o for o in others.array(int(base)) if o.array_task_id == int(task)]
    else:
        return "wait"
    if not records:
        return "wait"  # gone from squeue: Slurm lifts it at its next re-test
    pending = any(o.state == _PENDING or o.array_pending for o in records)
    finished = all(o.state in FINISHED_STATES for o in records)
    ok = all(o.state == "COMPLETED" for o in records)
    if kind == "after":
        if pending:
            return "wait"
        if not minutes:
            return "met"
        started = min((o.start_time for o in records if o.start_time is not None), default=None)
        if started is None:
            return "wait"
        return "met" if aware(now) - aware(started) >= dt.timedelta(minutes=int(minutes)) else "wait"
    if kind == "afterany":
        return "met" if finished else "wait"
    if kind == "afterok":
        return "wait" if not finished else ("met" if ok else "never")
    if kind == "afternotok":
        if any(o.state == "SPECIAL_EXIT" for o in records):
            return "met"
        return "wait" if not finished else ("never" if ok else "met")
    return "wait"  # expand, afterburstbuffer: Slurm's own re-test
