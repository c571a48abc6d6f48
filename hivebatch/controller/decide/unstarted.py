"""Step 0: a placed job Slurm has not started within the bound is taken back.

Something hivebatch does not see kept Slurm from starting it where it was pinned (a reservation
starting soon, a node drained between placing and starting, a need the pin could not know). Its cells
are given back at once, the job is held again (``act.take_back``) and placed again on other nodes: the
nodes it waited on are avoided for ``AVOID_FOR_S``. Its gres stays as it is, so it is placed again the
requeued jobs' way: a typed one on the same GPU indices, never re-typed (see ARCHITECTURE.md), an
untyped one where Slurm has no choice (``untyped``).
"""

from __future__ import annotations

from hivebatch.controller.decide.types import Round
from hivebatch.controller.observe import phase
from hivebatch.controller.record import placement_text

AVOID_FOR_S = 3600.0


def take_back_unstarted(r: Round) -> None:
    bound = r.ctx.settings.start_timeout_s
    for job in r.ledger.jobs.values():
        if job.state != "placed" or job.intent is not None or job.placed_at is None or not job.placement:
            continue
        sj = r.ledger.slurm.get(job.slurm_job_id)
        if sj is None or sj.held or phase(sj.state) != "pending":
            continue
        if (r.now - job.placed_at).total_seconds() < bound:
            continue
        why = (
            f"Slurm did not start it within {bound:.0f} s on {placement_text(job.placement)}"
            f" (Slurm's reason: {sj.reason or 'none'})"
        )
        r.out.take_backs.append((job, why))
        r.alloc.release(str(job.slurm_job_id))
