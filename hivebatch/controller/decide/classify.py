"""Step 1: the queue — held hsub jobs waiting to be placed — checked, then sorted by how each is placed."""

from __future__ import annotations

from functools import partial

from hivebatch.controller import incidents
from hivebatch.controller.decide.arrays import ArrayGate
from hivebatch.controller.decide.checks import check_request
from hivebatch.controller.decide.eligible import (
    kept_out_of_partitions,
    killed_for_dependency,
    not_eligible,
    over_partition_time,
    partition_stopped,
    past_deadline,
)
from hivebatch.controller.decide.isolate import isolated
from hivebatch.controller.decide.licenses import licenses_wait, short_of_licenses
from hivebatch.controller.decide.limits import within_limits
from hivebatch.controller.decide.partition_nodes import outside_partition_nodes, partition_node_range
from hivebatch.controller.decide.spread import PerGpu, spread_over_nodes
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.decide.unstarted import limited_lately
from hivebatch.db.models import Job
from hivebatch.request import JobRequest, plugin_extras
from hivebatch.sharing.integration import is_slice
from hivebatch.slurm.types import SlurmJob, shown_id


def classify(r: Round) -> None:
    """Bad requests are rejected with their reason, GPU-less jobs placed at once; the rest go to
    ``r.slices`` (a part of one GPU), ``r.requeued`` (placed before, with the gres Slurm keeps) or ``r.fresh``."""
    ledger = r.ledger
    candidates = [
        j
        for j in ledger.jobs.values()
        if not j.foreign
        and j.intent is None
        and j.state in ("queued", "preempted", "rejected")
        and j.slurm_job_id in ledger.slurm
        and ledger.slurm[j.slurm_job_id].held
    ]
    # an array's tasks in index order, so the throttle admits the first ones
    candidates.sort(key=lambda j: (j.submit_time or r.now, _task_index(r, j), j.slurm_job_id))
    gate = ArrayGate.of(r)
    noticing = {
        j.notice_by for j in ledger.jobs.values() if j.notice_by is not None and j.notice_until is not None
    }
    for job in candidates:
        isolated(r, job, partial(_sort_one, r, job, gate, noticing))
    gate.request_splits(r)


def _preemptor_waiting(r: Round, job: Job, noticing: set[int]) -> int | None:
    """The job a guaranteed victim left its GPUs for, while that job waits for other victims' notices
    (``noticing``). Once none is left in notice, the victim may come back: the preemptor finds its
    GPUs free this cycle, and a victim resumed before the policy round it takes back before it starts."""
    by = r.ledger.jobs.get(job.notice_by) if job.notice_by is not None and job.priority >= 0 else None
    if by is None or by.slurm_job_id not in noticing or by.intent is not None:
        return None
    return by.slurm_job_id if by.state in ("queued", "preempted") else None


def _task_index(r: Round, job: Job) -> int:
    task = r.ledger.slurm[job.slurm_job_id].array_task_id
    return -1 if task is None else task


def _sort_one(r: Round, job: Job, gate: ArrayGate, noticing: set[int]) -> None:
    ledger, spec = r.ledger, r.ctx.spec
    sj = ledger.slurm[job.slurm_job_id]
    first = job.state != "preempted" and not job.placement
    if sj.array_pending_meta:
        # an array its owner holds (sbatch --array --hold) is not split: the split is the controller's
        # hold, which Slurm shows as an admin's, and its tasks were placed without the owner's release
        held = not_eligible(sj, r.now, first_start=first, others=r.listing, owner_begin=job.owner_begin)
        if held:
            r.out.waits.append(Wait(job, held, not_startable=True))
        else:
            gate.hold_back(r, job, sj)
        return
    doomed = killed_for_dependency(sj, r.now, r.listing)
    if doomed:
        r.out.waits.append(Wait(job, doomed, not_startable=True))
        r.out.doomed.append((job, doomed))
        return
    not_yet = (
        not_eligible(sj, r.now, first_start=first, others=r.listing, owner_begin=job.owner_begin)
        or partition_stopped(sj, r.stopped_partitions)
        or kept_out_of_partitions(sj, r.partition_access)
        or over_partition_time(sj, r.partition_max_time)
        or outside_partition_nodes(sj, r.partition_node_limits)
        or limited_lately(job, r.now)
    )
    if not_yet:
        r.out.waits.append(Wait(job, not_yet, not_startable=True))
        return
    backing_off = incidents.waiting_out(job, r.now)
    if backing_off:
        # its start is known: when it is placed again (hq would show the start of its last run)
        r.out.waits.append(
            Wait(job, backing_off, predicted_start=incidents.retry_at(job), not_startable=True)
        )
        return
    short = short_of_licenses(sj, r.licenses_left)
    if short:
        r.out.waits.append(licenses_wait(r, job, sj, short))
        return
    late = past_deadline(sj, r.now)
    if late:
        r.out.waits.append(Wait(job, late, not_startable=True))
        r.out.past_deadline.append((job, late))
        return
    throttled = gate.admit(sj)
    if throttled:
        r.out.waits.append(Wait(job, throttled))
        return
    by = _preemptor_waiting(r, job, noticing)
    if by is not None:
        # back now, it would take GPUs its preemptor needs, and be told to leave again next cycle
        r.out.waits.append(
            Wait(job, f"preempted by job {shown_id(by, ledger.slurm)}; it resumes once that job has started")
        )
        return
    req, problem = check_request(job, sj, spec, r.ctx.limits)
    if req is not None:
        req, sj, problem = _on_enough_nodes(r, job, within_limits(r, job, req), sj)
    if req is None:
        r.out.waits.append(Wait(job, problem or "invalid request", rejected=True))
    elif req.gpus == 0:
        r.out.places.append(Place(job, {}, None, None, predicted_end=None))
    elif ledger.sharing is not None and is_slice(spec, req.gpus, req.gpu_mem_mib, req.gpu_type):
        r.slices.append((job, req, sj))
    elif job.gres and job.placement:
        r.requeued.append((job, req))
    else:
        r.fresh.append((job, req, sj))


def _on_enough_nodes(
    r: Round, job: Job, req: JobRequest, sj: SlurmJob
) -> tuple[JobRequest | None, SlurmJob, str | None]:
    """The request on the nodes its tasks need, with the job's per-node needs for its share of GPUs
    there; or why it can never run."""
    extras = plugin_extras(sj)
    per_gpu = PerGpu.of(extras)
    per_task = int(extras.get("gpus_per_task") or 0)
    partition = partition_node_range(sj, r.partition_node_limits)
    wide, note, never = spread_over_nodes(
        req, sj, r.node_size(req.gpu_type, sj), r.ctx.spec, per_gpu, per_task, partition
    )
    if never:
        return None, sj, f"can never run as asked: {never}"
    if note:
        r.add_note(job.slurm_job_id, note)
        if not req.gpus_per_node and wide.gpus_per_node:
            sj = per_gpu.needs(sj, wide.gpus_per_node)  # its share of CPUs and memory on each node
    return wide, sj, None
