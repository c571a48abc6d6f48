"""Opportunistic jobs Slurm itself preempts (preempt/qos) for the CPUs or memory a guaranteed job needs.

The cells take back GPUs with hivebatch's own notice; CPUs and memory beside them Slurm takes back.
``hadmin slurm-config`` gives the opportunistic QOS a GraceTime of the config's notice for that class
and sets ``SlurmctldParameters=preempt_send_user_signal``, so Slurm sends such a job its own
``--signal`` (without one, SIGTERM to its steps) when it preempts it, and requeues it when the grace
ends. squeue shows the job's ``preempt_time`` meanwhile, its end moved to the grace's end
(tests/fixtures/slurm/preempt_grace.txt, squeue_preempt_grace.json).

The ledger follows that grace as one of its own notices (``controller.notice.follow_notice``): the
job's reason says it was told to leave and until when, and a job that saved and exited on its signal
ends COMPLETED, which Slurm does not requeue, so it is requeued and held to resume from what it saved,
as any victim that leaves during its notice.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from hivebatch.controller.notice import when
from hivebatch.controller.observe import to_utc
from hivebatch.controller.record import Recorder, placement_text
from hivebatch.db.models import Job
from hivebatch.slurm.types import SlurmJob
from hivebatch.slurmconf import PREEMPTABLE_QOS

SLURM_NOTICE = (
    "preempted by Slurm for the CPUs or memory a higher-priority job needs on {where}: told to leave; "
    "requeued and held at {until} at the latest"
)


def follow_slurm_grace(session: Session, rec: Recorder, job: Job, sj: SlurmJob, ph: str) -> None:
    """Start the ledger's notice of an opportunistic job Slurm preempts, running out its grace or ended
    in it (not cancelled by its owner); nothing for any other job."""
    if sj.preempt_time is None or job.notice_until is not None or job.intent is not None:
        return
    if job.qos != PREEMPTABLE_QOS or job.state != "running" or ph in ("pending", "cancelled"):
        return
    until = to_utc(sj.grace_end or sj.end_time) or rec.now
    where = placement_text(job.placement or {})
    job.notice_until = until
    job.reason = SLURM_NOTICE.format(where=where, until=when(until))
    told = "its --signal, else SIGTERM to its steps"
    if ph == "running":
        what = f"told to leave ({told}); requeued and held at {when(until)} unless it leaves earlier"
    else:  # it left before a cycle saw it in its grace
        since = to_utc(sj.preempt_time) or until
        what = f"told to leave at {when(since)} ({told}); it left during its grace"
    rec.event(
        session,
        job,
        "notice",
        f"Slurm preempts it for a higher-priority job's CPUs or memory on {where}: {what}",
        {"until": until.isoformat(), "by": None, "slurm": True},
    )
