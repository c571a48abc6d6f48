"""Step 9: a guaranteed job its VC has no room for, where idle GPUs would take it now as opportunistic
work, is told how to move there.

A student whose VC is full sees other GPUs idle in ``hq`` and asks why the job does not run there.
Slurm lets the owner change a pending job's QOS, so the answer names the command; whether to give
up the guarantee (an opportunistic job is preempted when a VC needs its GPUs) stays the owner's
choice.
"""

from __future__ import annotations

import datetime as dt

from hivebatch.cells import Request
from hivebatch.controller.decide.types import Round, Wait
from hivebatch.qos import Task
from hivebatch.slurm.types import shown_id
from hivebatch.slurmconf import PREEMPTABLE_QOS

#: a start predicted this close is not worth giving up the guarantee for
WORTH_IT_AFTER = dt.timedelta(minutes=5)

FitKey = tuple[str, int, int, str | None, frozenset[str]]


def hint(shown: str) -> str:
    """``shown``: the job as its owner sees it in hq and squeue (an array's task as 1948_0)."""
    return (
        "idle GPUs outside its VC's cells would run it now as opportunistic work, preempted when a VC"
        f" needs them: scontrol update job {shown} qos={PREEMPTABLE_QOS}"
    )


def _worth_telling(r: Round, w: Wait, waiting_on_notice: set[int]) -> bool:
    if w.rejected or w.not_startable or w.job.priority < 0:
        return False
    if w.job.slurm_job_id in waiting_on_notice:  # it starts when the jobs told to leave are gone
        return False
    return w.predicted_start is None or w.predicted_start > r.now + WORTH_IT_AFTER


def suggest_opportunistic(r: Round) -> None:
    tasks: dict[int, Task] = {r.reqs[t.job_id][0].slurm_job_id: t for t in r.tasks if t.job_id in r.reqs}
    waiting_on_notice = {waiting for waiting, _until in r.out.notices.values()}
    fits: dict[FitKey, bool] = {}  # thousands of waiting jobs share a few shapes
    for w in r.out.waits:
        task = tasks.get(w.job.slurm_job_id)
        if task is None or w.shape is None or not _worth_telling(r, w, waiting_on_notice):
            continue
        nodes, per_node = w.shape
        key = (task.vc, nodes, per_node, task.gpu_type, task.avoid_nodes)
        if key not in fits:
            req = Request(
                job_id=f"opportunistic-try:{w.job.slurm_job_id}",
                vc=task.vc,
                gpus=nodes * per_node,
                nodes=nodes,
                gpu_type=task.gpu_type,
                priority=-1,
                avoid_nodes=task.avoid_nodes,
            )
            fits[key] = r.alloc.try_allocate(req).result == "placed"
        if fits[key]:
            w.reason = f"{w.reason}; {hint(shown_id(w.job.slurm_job_id, r.ledger.slurm))}"
