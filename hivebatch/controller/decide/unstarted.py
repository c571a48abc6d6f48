"""Step 0: a placed job Slurm has not started within the bound is taken back.

Something hivebatch does not see kept Slurm from starting it where it was pinned (a reservation
starting soon, a node drained between placing and starting, a need the pin could not know). Its cells
are given back at once, the job is held again (``act.take_back``) and placed again on other nodes: the
nodes it waited on are avoided for ``avoid.AVOID_FOR_S``. A pin whose node visibly lost the room it needs
(CPUs, memory, the node itself) is taken back after ``BLOCKED_AFTER_S`` instead, and that node is
not avoided: each cycle judges it by what it has free. So is a pin Slurm itself expects to start only
past the bound (its backfill keeps the node for a job of higher priority, which hivebatch does not
see): that node is avoided, as at the bound. Its gres stays as it is, so it is placed again
the requeued jobs' way: a typed one on the same GPU indices, never re-typed (see ARCHITECTURE.md), an
untyped one where Slurm has no choice (``untyped``). A pin that counted on the CPUs or memory of running
opportunistic jobs gets the notice Slurm gives them before it requeues them (``grace_on``) on top of
the bound.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from hivebatch.controller.decide.fit import preempts_opportunistic, unfit_text, yielding_in_the_way
from hivebatch.controller.decide.times import aware
from hivebatch.controller.decide.types import Round, TakeBack
from hivebatch.controller.observe import phase
from hivebatch.controller.record import placement_text
from hivebatch.db.models import Job
from hivebatch.slurm.types import SlurmJob

# A limit of the job's QOS or association (per-user GPUs, the account's GPUs, running jobs …: Slurm's
# reasons QOS* and Assoc*) keeps a released job from starting anywhere until other jobs of its user or
# VC end (seen on the lab: QOSMaxGRESPerUser, pinned node after node). Such a pin is taken back at the
# next cycle, its node not avoided, and placed again at most once per LIMIT_RETRY_S, so its cells are
# not held idle meanwhile.
LIMITED = "Slurm's own limits keep it from starting"
LIMIT_RETRY_S = 60.0
# a pin whose node no longer has room for the job besides its GPUs is taken back after this, not after
# the whole bound (seen on the lab: a CPU-only job took node2's CPUs between the placing and Slurm's
# start, and the job waited the 300 s out with other nodes free); Slurm's next passes had their chance
BLOCKED_AFTER_S = 60.0


def slurm_limit(reason: str | None) -> bool:
    """Slurm keeps the job pending for a limit of its QOS or association, wherever it would run."""
    return bool(reason) and str(reason).startswith(("QOS", "Assoc"))


def limited_lately(job: Job, now: dt.datetime) -> str | None:
    """The job's reason while it waits out LIMIT_RETRY_S after Slurm's limits kept it from starting."""
    reason = job.reason or ""
    waiting = job.placed_at is not None and (now - job.placed_at).total_seconds() < LIMIT_RETRY_S
    return reason if reason.startswith(LIMITED) and waiting else None


def grace_on(r: Round, sj: SlurmJob, nodes: Iterable[str]) -> float:
    """Seconds Slurm may take to start ``sj`` on ``nodes`` besides its usual passes: the notice of the
    opportunistic jobs there that it waits for, those Slurm requeues for their CPUs or memory (their
    QOS's GraceTime, which hadmin slurm-config sets to the config's notice: preempt_grace.txt) and those
    told to leave a node their ExclusiveUser partition keeps to their user; 0 where none is there."""
    if not preempts_opportunistic(sj):
        return 0.0
    held = (r.ledger.nodes.get(n) for n in nodes)
    if not any(
        n is not None and (n.preemptible_cpus or n.preemptible_mem_mb or yielding_in_the_way(sj, n))
        for n in held
    ):
        return 0.0
    return float(r.ctx.notice.slurm_grace_s)


def take_back_unstarted(r: Round) -> None:
    for job in r.ledger.jobs.values():
        if job.state != "placed" or job.intent is not None or job.placed_at is None or not job.placement:
            continue
        sj = r.ledger.slurm.get(job.slurm_job_id)
        if sj is None or sj.held or phase(sj.state) != "pending":
            continue
        where = placement_text(job.placement)
        said = f"(Slurm's reason: {sj.reason or 'none'})"
        if sj.reason == "Licenses":
            # another job took them first: it waits for them without cells (licenses.short_of_licenses)
            then = "it waits for them holding no GPUs, and is placed again once they are free"
            r.out.take_backs.append(
                TakeBack(job, f"licenses it needs were taken first {said}", avoid=False, then=then)
            )
            r.alloc.release(str(job.slurm_job_id))
            continue
        if slurm_limit(sj.reason):
            then = f"hivebatch places it again within {LIMIT_RETRY_S:.0f} s, holding no GPUs meanwhile"
            if "PerJob" in sj.reason:  # QOSMaxWallDurationPerJobLimit …: it holds until the job is changed
                then += f"; the limit is on each job: change it (scontrol update job {sj.display_id} …) or cancel it"
            r.out.take_backs.append(TakeBack(job, f"{LIMITED} {said}", avoid=False, then=then))
            r.alloc.release(str(job.slurm_job_id))
            continue
        waited = (r.now - job.placed_at).total_seconds()
        grace = grace_on(r, sj, job.placement)
        bound = r.ctx.settings.start_timeout_s + grace
        if waited < min(bound, BLOCKED_AFTER_S):
            continue
        if blocked := {n: w for n, w in r.unfit_for(job, sj).items() if n in job.placement}:
            # the node is judged again each cycle by what it has free (or whether its partition is up): no
            # need to avoid it for an hour
            why = f"Slurm did not start it on {where}, where it no longer fits: {unfit_text(blocked)} {said}"
            avoid = False
        elif waited >= bound:
            within = f"{bound:.0f} s" + (
                f" (with {grace:.0f} s of notice to opportunistic jobs there)" if grace else ""
            )
            why = f"Slurm did not start it within {within} on {where} {said}"
            avoid = True
        elif sj.expected_start is not None and sj.expected_start > aware(job.placed_at) + dt.timedelta(
            seconds=bound
        ):
            # seen on the lab (tests/fixtures/slurm/squeue_priority_reservation.json): node1 had the CPUs
            # and GPU, but Slurm's backfill kept it for a pending job of higher priority
            expected = sj.expected_start.astimezone(dt.UTC).strftime("%H:%M:%S UTC")
            why = f"Slurm expects to start it on {where} only at {expected}, past the {bound:.0f} s bound {said}"
            avoid = True
        else:
            continue
        r.out.take_backs.append(TakeBack(job, why, avoid=avoid))
        r.alloc.release(str(job.slurm_job_id))
