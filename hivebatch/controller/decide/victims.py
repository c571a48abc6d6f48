"""Booking the jobs a placement preempts."""

from __future__ import annotations

from collections.abc import Iterable

from hivebatch.controller.decide.types import Place, Round, Wait


def take_victims(r: Round, p: Place, victims: Iterable[object]) -> None:
    """Book the jobs ``p`` preempts. A victim placed earlier in this very round never started: it is
    taken back and simply keeps waiting instead of being requeued."""
    for victim in victims:
        v = r.by_sid.get(str(victim))
        if v is None:
            continue
        if v.slurm_job_id in r.placed_now:
            r.out.places.remove(r.placed_now.pop(v.slurm_job_id))
            r.out.waits.append(Wait(v, f"its GPUs went to job {p.job.slurm_job_id} before it started"))
            continue
        r.out.victims[v.slurm_job_id] = p.job.slurm_job_id
        p.preempts.append(v.slurm_job_id)
