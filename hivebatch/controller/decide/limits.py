"""Per-user limits on the strict classes at placement: a job whose owner went over a limit after it was
submitted (the job_submit plugin let it in while they were under, or its usage file was stale) runs as
the next class down it is within, and its owner is told why; it never waits for the 7-day window."""

from __future__ import annotations

from dataclasses import replace

from hivebatch.controller.decide.types import Round
from hivebatch.db.models import Job
from hivebatch.request import JobRequest
from hivebatch.userlimits import STRICT_CLASSES, StrictUse, class_within


def within_limits(r: Round, job: Job, req: JobRequest) -> JobRequest:
    """``req`` in the class its owner may use now; records the class and why it is lower."""
    r.out.classes[job.slurm_job_id] = req.qos
    limits = r.ctx.user_limits
    if limits.empty or req.qos not in STRICT_CLASSES:
        return req
    user = job.user or ""
    cls, why = class_within(limits, r.ledger.strict_use, user, req.vc, req.qos)
    if why is not None:
        r.add_note(job.slurm_job_id, f"runs as {cls}: {why}")
        req = replace(req, qos=cls)
        r.out.classes[job.slurm_job_id] = cls
    if cls in STRICT_CLASSES:
        # counted as holding GPUs from here: the owner's next waiting job of the class meets the limit
        r.ledger.strict_use.setdefault((user, req.vc, cls), StrictUse()).running += 1
    return req
