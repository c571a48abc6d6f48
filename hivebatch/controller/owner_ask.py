"""An owner's new GPU ask for a job still waiting for GPUs, kept in the ledger.

Plain Slurm lets the owner of a pending job change its GPUs and node count (``scontrol update JobId=N
Gres=gpu:2`` or ``NumNodes=2``; tests/fixtures/slurm/owner_gpu_update.txt). The job_submit plugin checks
the new ask as it checks a submission, takes the GPUs off the update and notes the ask in the file only
slurmctld's user writes, since it cannot rewrite the admin comment on an owner's update. From then on
the ledger's request is the job's: the controller places the job with it and ``hq`` shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from sqlalchemy.orm import Session

from hivebatch.controller.ledger import Ledger
from hivebatch.controller.record import Recorder, set_request
from hivebatch.controller.refusals import AskChange, Note, job_of, refused
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest, request_of
from hivebatch.slurm.types import SlurmJob

KIND = "ask_changed"
#: the request fields the plugin notes: the whole GPU ask, what it does not name is unset
ASK_FIELDS = ("gpus", "nodes", "gpus_per_node", "gpu_mem_mib", "gpu_type")


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
    new = inherit(JobRequest(**(job.request or {})), ask)
    new.validate()
    return new


def waits_unplaced(job: Job) -> bool:
    return job.state in ("queued", "rejected") and not job.gres


def apply(session: Session, rec: Recorder, job: Job, change: AskChange) -> None:
    """The job waits with the new ask; an ask that came too late or is unusable is an update refused."""
    if job.foreign or not job.request:
        return
    if not waits_unplaced(job):
        # the controller placed it in the moment between its own read of the notes and the update
        refused(
            session,
            rec,
            job,
            change.at,
            change.uid,
            f"hivebatch had placed it on GPUs by then, so it runs as it asked before ({job.gpus} GPU(s)):"
            " cancel and resubmit to change its GPUs",
        )
        return
    try:
        new = _new_request(job, change.ask)
    except (HivebatchError, TypeError) as exc:
        refused(session, rec, job, change.at, change.uid, f"its new GPU ask is unusable ({exc})")
        return
    before = job.request
    set_request(job, new)
    rec.event(
        session,
        job,
        KIND,
        f"its owner changed its GPU ask at {change.at:%H:%M UTC}: now {describe(new)}",
        {"uid": change.uid, "request": job.request, "before": before},
    )


def _targets(change: AskChange, jobs: dict[int, Job], slurm: Mapping[int, SlurmJob]) -> list[Job]:
    """The job the ask is for; for an array's, each of its tasks still waiting unplaced (those placed
    or running keep their GPUs, as Slurm's own running tasks keep theirs), else the record noted."""
    noted = job_of(change, jobs)
    if change.array is None:
        return [noted] if noted is not None else []
    tasks = [
        job
        for sid, job in jobs.items()
        if (sj := slurm.get(sid)) is not None
        and sj.array_job_id == change.array
        and waits_unplaced(job)
        and job_of(replace(change, slurm_job_id=sid), jobs) is not None
    ]
    return tasks or ([noted] if noted is not None else [])


def apply_all(session: Session, rec: Recorder, notes: Sequence[Note], ledger: Ledger) -> None:
    for change in notes:
        if isinstance(change, AskChange):
            for job in _targets(change, ledger.jobs, ledger.slurm):
                apply(session, rec, job, change)


def _ask_of(request: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(request.get(k) for k in ASK_FIELDS)


def array_ask(array: int, jobs: dict[int, Job], slurm: Mapping[int, SlurmJob]) -> dict[str, Any] | None:
    """The ask the array's owner changed it to, or None: what the ledger keeps for the array's own
    record (the job id of the array: it holds the tasks not split off yet, and at the end is the last
    task; tests/fixtures/slurm/squeue_array_split.json), where it differs from its admin comment's."""
    job, sj = jobs.get(array), slurm.get(array)
    if job is None or sj is None or not job.request or job.foreign:
        return None
    submitted = request_of(sj)
    if submitted is None or _ask_of(asdict(submitted)) == _ask_of(job.request):
        return None
    return {k: job.request.get(k) for k in ASK_FIELDS}


def inherit(req: JobRequest, ask: Mapping[str, Any] | None) -> JobRequest:
    """``req`` with ``ask`` in place of its GPU ask: a new ask of its owner's, or, for a record split off
    an array whose ask its owner changed (it carries the admin comment of the submit), the array's."""
    if not ask:
        return req
    return JobRequest(**{**asdict(req), **{k: ask.get(k) for k in ASK_FIELDS}})


__all__ = ["ASK_FIELDS", "KIND", "apply", "apply_all", "array_ask", "describe", "inherit", "waits_unplaced"]
