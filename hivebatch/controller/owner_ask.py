"""An owner's new GPU ask for a job still waiting for GPUs, kept in the ledger.

Plain Slurm lets the owner of a pending job change its GPUs and node count (``scontrol update JobId=N
Gres=gpu:2`` or ``NumNodes=2``; tests/fixtures/slurm/owner_gpu_update.txt). The job_submit plugin checks
the new ask as it checks a submission, takes the GPUs off the update and notes the ask in the file only
slurmctld's user writes, since it cannot rewrite the admin comment on an owner's update. From then on
the ledger's request is the job's: the controller places the job with it and ``hq`` shows it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from sqlalchemy.orm import Session

from hivebatch.controller.record import Recorder
from hivebatch.controller.refusals import AskChange, job_of, refused
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest

KIND = "ask_changed"
#: the request fields the plugin notes: the whole GPU ask, what it does not name is unset
ASK_FIELDS = ("gpus", "nodes", "gpus_per_node", "gpu_mem_mib", "gpu_type")
# the ledger's GPU count is a 32-bit column on PostgreSQL (hivebatch.bounds refuses larger asks)
INT32_MAX = 2**31 - 1


def describe(req: JobRequest) -> str:
    if req.gpu_mem_mib:
        return f"a {req.gpu_mem_mib // 1024} GiB slice of one GPU"
    kind = f" {req.gpu_type}" if req.gpu_type else ""
    if req.nodes and req.gpus_per_node:
        return f"{req.gpus}{kind} GPU(s), {req.nodes} node(s) x {req.gpus_per_node}"
    return f"{req.gpus}{kind} GPU(s)"


def _new_request(job: Job, ask: dict[str, Any]) -> JobRequest:
    """The job's request with the new ask; HivebatchError or TypeError when it is not one."""
    gpus = ask.get("gpus")
    if type(gpus) is not int or gpus < 1:
        raise HivebatchError(f"a GPU job needs at least one GPU, got {gpus!r}")
    changed: dict[str, Any] = {**(job.request or {}), **{k: ask.get(k) for k in ASK_FIELDS}}
    new = JobRequest(**changed)
    new.validate()
    return new


def apply(session: Session, rec: Recorder, job: Job, change: AskChange) -> None:
    """The job waits with the new ask; an ask that came too late or is unusable is an update refused."""
    if job.foreign or not job.request:
        return
    if job.state not in ("queued", "rejected") or job.gres:
        # the controller placed it in the moment between its own read of the notes and the update
        refused(
            session,
            rec,
            job,
            change.at,
            change.uid,
            f"hivebatch had placed it on GPUs by then, so it runs as first asked ({job.gpus} GPU(s)):"
            " cancel and resubmit to change its GPUs",
        )
        return
    try:
        new = _new_request(job, change.ask)
    except (HivebatchError, TypeError) as exc:
        refused(session, rec, job, change.at, change.uid, f"its new GPU ask is unusable ({exc})")
        return
    before = job.request
    job.request = {k: v for k, v in asdict(new).items() if v is not None}
    job.gpus = min(new.gpus, INT32_MAX)
    job.gpu_type = new.gpu_type
    rec.event(
        session,
        job,
        KIND,
        f"its owner changed its GPU ask at {change.at:%H:%M UTC}: now {describe(new)}",
        {"uid": change.uid, "request": job.request, "before": before},
    )


def apply_all(session: Session, rec: Recorder, changes: list[AskChange], jobs: dict[int, Job]) -> None:
    for change in changes:
        job = job_of(change, jobs)
        if job is not None:
            apply(session, rec, job, change)


__all__ = ["ASK_FIELDS", "KIND", "apply", "apply_all", "describe"]
