"""Job arrays in the fake Slurm, as slurmctld 22.05 keeps them (recorded on the lab:
tests/fixtures/slurm/squeue_array_split.json): one record for the pending tasks, split on an update."""

from __future__ import annotations

from dataclasses import replace

from hivebatch.slurm.arrays import array_tasks
from hivebatch.slurm.types import SlurmError
from hivebatch.testing.fake_slurm.state import Job, State


def make_array(j: Job, spec: str) -> None:
    """``--array=SPEC`` on a new job: it stands for every task until they are split off."""
    tasks, j.array_max = array_tasks(spec)
    j.array_job_id = j.job_id
    # an array of one task too: squeue shows it as 520_[3] until it starts (array_single_task.txt)
    j.array_pending = tasks


def split_task(state: State, array_job_id: int, task_id: int) -> Job:
    """The task's own record: split off the array's record (which becomes the last task when one is
    left), or the one it already has. Raises SlurmError for a task the array does not have."""
    for j in state.jobs.values():
        if j.array_job_id == array_job_id and j.array_task_id == task_id and not j.array_pending:
            return j
    meta = next(
        (j for j in state.jobs.values() if j.array_job_id == array_job_id and task_id in j.array_pending),
        None,
    )
    if meta is None:
        raise SlurmError(["scontrol", "hold", f"{array_job_id}_{task_id}"], 1, "Invalid job id specified")
    if meta.array_pending == [task_id]:
        return meta  # Slurm splits nothing off a record of one task (array_single_task.txt)
    meta.array_pending.remove(task_id)
    jid = state.next_id
    state.next_id += 1
    state.jobs[jid] = replace(
        meta, job_id=jid, array_task_id=task_id, array_pending=[], gpus={}, shards={},
        env=dict(meta.env), required_nodes=list(meta.required_nodes),
    )  # fmt: skip
    if len(meta.array_pending) == 1:
        meta.array_task_id = meta.array_pending.pop()
    return state.jobs[jid]
