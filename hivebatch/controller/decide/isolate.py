"""One job's failure stays that job's: it is rejected with the reason and the round goes on."""

from __future__ import annotations

from collections.abc import Callable

from hivebatch.controller.decide.types import Round, Wait
from hivebatch.db.models import Job


def failure_reason(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"hivebatch cannot plan it ({type(exc).__name__}: {text}); check its numbers (-t, --iters, …) or resubmit"


def reject(r: Round, job: Job, exc: BaseException) -> None:
    """Take back anything decided for ``job`` and reject it with the failure as its reason."""
    placed = r.placed_now.pop(job.slurm_job_id, None)
    r.out.places = [p for p in r.out.places if p.job is not job and p is not placed]
    r.out.waits = [w for w in r.out.waits if w.job is not job]
    r.out.victims = {v: by for v, by in r.out.victims.items() if by != job.slurm_job_id}
    r.out.waits.append(Wait(job, failure_reason(exc), rejected=True))


def isolated(r: Round, job: Job, work: Callable[[], None]) -> None:
    """Run one job's part of a step; any exception rejects only that job."""
    try:
        work()
    except Exception as exc:  # noqa: BLE001 - whatever one job's numbers do, the others are planned
        reject(r, job, exc)
