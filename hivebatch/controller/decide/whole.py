"""Whole-GPU jobs that hold their GPUs as shards, so GPU slices may use the memory they leave."""

from __future__ import annotations

from hivebatch.db.models import Job
from hivebatch.request import JobRequest
from hivebatch.sharing.ledger import SharingLedger


def note_whole(led: SharingLedger | None, job: Job, req: JobRequest, placement: dict[str, list[int]]) -> None:
    if led is not None and req.priority >= 0 and req.gpu_mem_mib:
        led.note_whole_job(str(job.slurm_job_id), req.vc, req.priority, placement, req.gpu_mem_mib)


def whole_gres(
    led: SharingLedger | None, job: Job, req: JobRequest | None, placement: dict[str, list[int]]
) -> str | None:
    """Shards instead of whole GPUs for a guaranteed job that declared its memory per GPU (--gpu-mem)
    and landed, one GPU per node, where the admin lets others use what it leaves
    (``sharing.allow_mixed_nodes`` / ``colocate``); None: whole GPUs."""
    if led is None or req is None:
        return None
    if req.priority < 0 or not req.gpu_mem_mib:
        return None  # an opportunistic job is preempted first anyway: it never hosts others' slices
    gres = str(led.whole_job_gres(req.vc, placement, req.gpu_mem_mib))
    if not gres.startswith("shard:"):
        return None
    note_whole(led, job, req, placement)
    return gres
