"""When each job holding cells is expected to end, for the backfill reservations of the policy round.

A running job's end is its predicted end while that is still ahead; a job running past its
prediction (or without one) is expected to end at its time limit — Slurm's limit of the job counted
from the start of its current run, else the limit its request names. A job with neither is left
out: nobody can tell when its GPUs come free, and a head waiting for them gets no reservation.
"""

from __future__ import annotations

import datetime as dt
import math

from hivebatch.controller.decide.estimate import shared_gpu_ends
from hivebatch.controller.decide.times import epoch
from hivebatch.controller.decide.types import Round
from hivebatch.db.models import Job


def expected_end(job: Job, limit_s: float | None, now: dt.datetime) -> float | None:
    """Epoch seconds at which ``job`` should end; ``limit_s`` is Slurm's time limit of it."""
    if job.predicted_end is not None and job.predicted_end > now:
        return epoch(job.predicted_end)
    limit = limit_s or (job.request or {}).get("time_limit_s")
    began = job.segment_start or job.start_time or job.placed_at
    if limit and began is not None:
        return epoch(began) + float(limit)
    return epoch(job.predicted_end) if job.predicted_end is not None else None


def running_ends(r: Round) -> dict[str, float]:
    """Cell-core job id -> expected end, for every job the allocator holds whose end is known."""
    held = r.alloc.jobs()
    out: dict[str, float] = {}
    for jid in held:
        job = r.by_sid.get(jid)
        if job is None:
            continue
        placed = r.placed_now.get(job.slurm_job_id)
        if placed is not None and placed.predicted_end is not None:  # resumed earlier this cycle
            out[jid] = epoch(placed.predicted_end)
            continue
        sj = r.ledger.slurm.get(job.slurm_job_id)
        end = expected_end(job, float(sj.time_limit_s) if sj and sj.time_limit_s else None, r.now)
        if end is not None:
            out[jid] = end
    if r.ledger.sharing is not None:
        running = {j.slurm_job_id: j for j in r.ledger.jobs.values() if j.state in ("placed", "running")}
        placed_end = {p.job.slurm_job_id: p.predicted_end for p in r.out.places}
        for cell, end in shared_gpu_ends(r.ledger.sharing, running, placed_end, r.now).items():
            if cell in held and math.isfinite(end):
                out[cell] = end
    return out
