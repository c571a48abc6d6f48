"""Preemption notices carried out: the signal a victim asked for, then its requeue.

A victim's intent "notice" and the end of its notice (``Job.notice_until``) are committed before the
signal is sent; once Slurm took the signal the intent is cleared, the end stays. A controller stopped
in between sends the signal again next cycle (a victim may see it twice, never not at all). Reconcile
follows a job in notice (``follow_notice``): still running at the end → requeued and held; requeued
meanwhile (its own trap may ``scontrol requeue``) → held; ended during the notice → requeued and held
too, to resume from what it saved, unless its owner cancelled it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sqlalchemy.orm import Session

from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import to_utc
from hivebatch.controller.preemption import book_preemption, preemptor, resume_reason
from hivebatch.controller.record import Recorder
from hivebatch.db.models import Job
from hivebatch.notice import signal_of
from hivebatch.request import plugin_extras
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import SlurmError, SlurmJob


def when(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


NOTICE_REASON = "preempted by {who}: told to leave {what}; requeued and held at {until} at the latest"


def write_notice(
    job: Job, by: int, until: dt.datetime, what: str = "its GPUs", slurm: Mapping[int, SlurmJob] | None = None
) -> None:
    """``slurm``: the jobs Slurm lists, to name the preemptor as squeue shows it."""
    job.intent = "notice"
    job.notice_until = until
    job.notice_by = by
    job.reason = NOTICE_REASON.format(who=preemptor(by, slurm), what=what, until=when(until))


def send_notice(
    session: Session, rec: Recorder, backend: SlurmBackend, job: Job, sj: SlurmJob | None, failed: list[str]
) -> None:
    """Signal the victim as it asked (--signal) or with SIGTERM to the whole job."""
    spec = signal_of(plugin_extras(sj))
    try:
        backend.signal(job.slurm_job_id, spec.signal, spec.target)
    except SlurmError as exc:
        # an ended job is settled by reconcile next cycle (requeued); any other failure is tried again
        failed.append(f"notice of job {job.slurm_job_id}: {exc}")
        rec.event(session, job, "act_failed", f"its preemption notice could not be sent, tried again: {exc}")
        session.commit()
        return
    job.intent = None
    until = job.notice_until or rec.now
    rec.event(
        session,
        job,
        "notice",
        f"told to leave: {spec.text}; requeued and held at {when(until)} unless it leaves earlier",
        {"signal": spec.signal, "target": spec.target, "until": until.isoformat(), "by": job.notice_by},
    )
    session.commit()


def follow_notice(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> bool:
    """One job in notice against Slurm; False when it is not in notice (the ordinary rules apply)."""
    if job.notice_until is None or job.intent not in (None, "notice"):
        return False
    if ph == "running":
        if job.intent == "notice" and rec.now < job.notice_until:
            ledger.redo_notice.append(job)  # the signal may not have gone out
        elif rec.now >= job.notice_until:
            job.intent = "preempt"  # its cells are free for this cycle's decisions
            ledger.redo_preempt.append(job)
        return True
    if ph == "pending":
        by = job.notice_by
        book_preemption(
            session, rec, job, rec.now, "preempted", "left during its notice: requeued; held", {"by": by}
        )
        job.reason = resume_reason(job, preemptor(by, ledger.slurm))
        if not sj.held:
            try:
                backend.hold(job.slurm_job_id)
            except SlurmError as exc:
                rec.event(session, job, "act_failed", f"hold failed: {exc}")
        return True
    if ph == "cancelled":
        return False  # its owner cancelled it: it ends as any cancelled job
    try:
        backend.requeue_hold(job.slurm_job_id)
    except SlurmError as exc:
        rec.event(session, job, "act_failed", f"ended during its notice and could not be requeued: {exc}")
        return False
    end = to_utc(sj.end_time) or rec.now
    by = job.notice_by
    book_preemption(
        session,
        rec,
        job,
        end,
        "preempted",
        f"left during its notice (Slurm state {sj.state}, exit {sj.exit_code or '?'}); requeued and held",
        {"by": by},
    )
    job.reason = resume_reason(job, preemptor(by, ledger.slurm))
    return True
