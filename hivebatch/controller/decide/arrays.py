"""Job arrays: every task is placed as a job of its own, and the ``%`` throttle holds.

Slurm lists the pending tasks of an array as one record (``123_[4-9%2]``); releasing that record would
let every task in it run on the one placement. So the record itself is never placed: a few of its tasks
at a time are split off into records of their own (``SlurmBackend.split_array_task``: an Operator's
hold of the task, recorded in tests/fixtures/slurm/squeue_array_split.json), and each of those
is then an ordinary held job: its own cells, class and prediction. At most the throttle's number of an
array's tasks are placed or running at once, as Slurm would run them; an unthrottled array has at most
``SPLIT_AHEAD`` tasks split off and waiting, so a 1000-task array costs slurmctld no more records than
it can start soon.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hivebatch.controller.decide.types import Round, Wait
from hivebatch.db.models import Job
from hivebatch.slurm.arrays import array_tasks
from hivebatch.slurm.types import SlurmError, SlurmJob

SPLIT_AHEAD = 16


@dataclass
class ArrayGate:
    """One round's view of the arrays: tasks placed or running, tasks admitted, records to split."""

    active: Counter[int] = field(default_factory=Counter)
    admitted: Counter[int] = field(default_factory=Counter)
    waiting_tasks: Counter[int] = field(default_factory=Counter)
    metas: list[tuple[Job, SlurmJob]] = field(default_factory=list)

    @classmethod
    def of(cls, r: Round) -> ArrayGate:
        gate = cls()
        for job in r.ledger.jobs.values():
            sj = r.ledger.slurm.get(job.slurm_job_id)
            if sj is None or not sj.array_job_id:
                continue
            if job.state in ("placed", "running") or job.intent == "place":
                gate.active[sj.array_job_id] += 1
        return gate

    def admit(self, sj: SlurmJob) -> str | None:
        """None when this array task may be placed now, else why it waits (the throttle)."""
        array = sj.array_job_id
        if not array or sj.array_task_id is None:
            return None
        self.waiting_tasks[array] += 1
        limit = sj.array_max_tasks
        if limit and self.active[array] + self.admitted[array] >= limit:
            return (
                f"array {array} runs at most {limit} tasks at once (%{limit}); "
                f"{self.active[array]} placed or running"
            )
        self.admitted[array] += 1
        return None

    def hold_back(self, r: Round, job: Job, sj: SlurmJob) -> None:
        """The record of tasks not split off yet: it waits, and the tasks to split next are chosen."""
        self.metas.append((job, sj))

    def request_splits(self, r: Round) -> None:
        """After every task was admitted or not: the records of pending tasks wait, some tasks split off."""
        for job, sj in self.metas:
            array = sj.array_job_id or job.slurm_job_id
            limit = sj.array_max_tasks
            why = f"array tasks {sj.array_pending} not started yet"
            if limit and self.active[array] >= limit:
                why += f": at most {limit} run at once (%{limit}), {self.active[array]} placed or running"
            else:
                why += ": each is placed on its own in turn"
            r.out.waits.append(Wait(job, why))
            try:
                pending, _ = array_tasks(sj.array_pending)
            except SlurmError:
                continue  # not a form this reader knows: the record waits, Slurm keeps the tasks
            room = (limit - self.active[array] if limit else SPLIT_AHEAD) - self.waiting_tasks[array]
            for task in pending[: max(room, 0)]:
                r.out.splits.append((array, task))
