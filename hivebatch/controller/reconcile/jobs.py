"""Bring the ledger's unfinished jobs up to date with Slurm and add the jobs Slurm has that it lacks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.controller import owner_ask, owner_start
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import Observation, phase, to_utc
from hivebatch.controller.reconcile.machine import finish, follow, follow_foreign, start
from hivebatch.controller.reconcile.slurm_view import gpus_of, shard_placement
from hivebatch.controller.record import Recorder, placement_text, set_request
from hivebatch.controller.refusals import Note
from hivebatch.db.models import FINAL_STATES, Job
from hivebatch.request import JobRequest, RequestError, request_from_slurm
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import SlurmError, SlurmJob


def _new_job(sj: SlurmJob, req: JobRequest | None, now: dt.datetime) -> Job:
    job = Job(
        slurm_job_id=int(sj.job_id),
        name=sj.name,
        user=sj.user,
        account=sj.account,
        state="queued",
        submit_time=to_utc(sj.submit_time) or now,
        created_at=now,
        updated_at=now,
        preemptions=0,
        gpu_hours_guaranteed=0.0,
        gpu_hours_opportunistic=0.0,
        gpu_hours_lost=0.0,
    )
    if req is None:
        job.foreign = True
        job.vc_name = sj.account or None
        job.qos = sj.qos or None
        job.priority = 0
        job.gpus = sum(len(v) for v in gpus_of(sj).values())
    else:
        job.foreign = False
        job.vc_name = req.vc
        job.qos = req.qos
        job.priority = req.priority
        set_request(job, req)
    return job


def _known_final(session: Session, ids: list[int]) -> set[int]:
    out: set[int] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        out.update(session.scalars(select(Job.slurm_job_id).where(Job.slurm_job_id.in_(chunk))))
    return out


def _reopened(session: Session, rec: Recorder, obs: Observation, closed: set[int]) -> list[Job]:
    """Closed ledger rows of jobs Slurm lists as pending or running again, reopened."""
    alive = [jid for jid in sorted(closed) if phase(obs.jobs[jid].state) in ("pending", "running")]
    rows = list(session.scalars(select(Job).where(Job.slurm_job_id.in_(alive)))) if alive else []
    for job in rows:
        reopen(session, rec, job, obs.jobs[job.slurm_job_id])
    return rows


def _rows_for_unknown(session: Session, obs: Observation, known: dict[int, Job], rec: Recorder) -> list[Job]:
    """New rows for the Slurm jobs the ledger lacks: hsub jobs still alive, and GPU users not from hsub.
    Jobs the ledger closed although Slurm lists them alive are reopened instead."""
    unknown = [jid for jid in obs.jobs if jid not in known]
    already_final = _known_final(session, unknown) if unknown else set()
    for job in _reopened(session, rec, obs, already_final):
        known[job.slurm_job_id] = job
    rows: list[Job] = []
    for jid in unknown:
        if jid in already_final:
            continue
        sj = obs.jobs[jid]
        ph = phase(sj.state)
        try:
            req = request_from_slurm(sj.admin_comment, sj.comment, sj.account, sj.qos, sj.time_limit_s)
        except RequestError as exc:
            if ph == "pending":
                rows.append(_untrusted_job(sj, str(exc), obs.now))
            continue
        if req is None and not (ph == "running" and gpus_of(sj)):
            continue  # not hivebatch's and not using GPUs: none of our business
        if req is not None and ph not in ("pending", "running"):
            continue  # a GPU job that came and went between two cycles; accounting has it
        if req is not None and sj.array_job_id and ph == "pending":
            req = owner_ask.inherit(req, owner_ask.array_ask(sj.array_job_id, known, obs.jobs))
        rows.append(_new_job(sj, req, obs.now))
    return rows


def _untrusted_job(sj: SlurmJob, why: str, now: dt.datetime) -> Job:
    """A job whose admin comment claims it for hivebatch but cannot be trusted: never placed, and
    its owner sees why (only SlurmUser/root or the job_submit plugin can write an admin comment)."""
    job = _new_job(sj, None, now)
    job.foreign = False
    job.gpus = 0
    job.state = "rejected"
    job.reason = f"not placed: {why}; cancel it and submit it again"
    return job


def _introduce(session: Session, rec: Recorder, job: Job, sj: SlurmJob, now: dt.datetime) -> None:
    """The first events of a row just added: foreign GPU use, an adopted running job, or a submission."""
    if job.foreign:
        job.placement = gpus_of(sj)
        job.state = "running"
        job.start_time = job.segment_start = to_utc(sj.start_time) or now
        rec.event(
            session,
            job,
            "foreign",
            f"not submitted through hsub but uses GPUs {placement_text(job.placement)}; they count as occupied",
            {"placement": job.placement, "user": sj.user, "account": sj.account},
        )
        return
    asked = f"{sj.user} asked for {job.gpus} GPU(s) in VC {job.vc_name} ({job.qos})"
    if phase(sj.state) == "running":
        # started without a ledger entry (ledger lost or rebuilt): adopt it where Slurm runs it
        rec.event(session, job, "submitted", asked)
        job.placement = gpus_of(sj) or None
        if not job.placement:
            job.placement, job.gres = shard_placement(sj)
        start(session, rec, job, sj)
    else:
        rec.event(session, job, "submitted", asked, {"request": job.request})


def sync_jobs(
    session: Session, obs: Observation, rec: Recorder, backend: SlurmBackend, notes: Sequence[Note] = ()
) -> Ledger:
    """Bring every unfinished ledger row up to date with Slurm, add the jobs Slurm has that the ledger lacks.
    ``notes``: the owners' updates the job_submit plugin passed on since the last cycle, applied before
    each job is followed (a start time set just before its owner's release must be kept when the job
    is taken back)."""
    rows = session.scalars(select(Job).where(Job.state.notin_(FINAL_STATES))).all()
    jobs = {j.slurm_job_id: j for j in rows}
    ledger = Ledger(jobs=jobs, slurm=obs.jobs)
    new_rows = _rows_for_unknown(session, obs, jobs, rec)
    if new_rows:
        session.add_all(new_rows)
        session.flush()
    for job in new_rows:
        jobs[job.slurm_job_id] = job
        _introduce(session, rec, job, obs.jobs[job.slurm_job_id], obs.now)
    owner_ask.apply_all(session, rec, notes, ledger)
    owner_start.apply_all(session, rec, notes, ledger)

    missing: list[Job] = []
    for jid, job in list(jobs.items()):
        sj = obs.jobs.get(jid)
        if sj is None:
            missing.append(job)
        else:
            _follow_isolated(session, rec, ledger, job, sj, backend)
    if missing:
        resolve_missing(session, rec, missing, backend)
    for jid in [j for j, row in jobs.items() if row.state in FINAL_STATES]:
        jobs.pop(jid)
    return ledger


def _follow_isolated(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, backend: SlurmBackend
) -> None:
    """One job's update; if it fails, an event says why and the others go on (no savepoint per job:
    it would cost a flush for each of thousands of jobs every cycle)."""
    try:
        if job.foreign:
            follow_foreign(session, rec, job, sj, phase(sj.state))
        else:
            follow(session, rec, ledger, job, sj, phase(sj.state), backend)
    except Exception as exc:  # noqa: BLE001 - one job's record must not stop the cycle for all
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        rec.event(
            session, job, "reconcile_failed", f"could not follow it this cycle ({type(exc).__name__}: {text})"
        )


def resolve_missing(session: Session, rec: Recorder, missing: list[Job], backend: SlurmBackend) -> None:
    """Jobs Slurm no longer lists end only on positive evidence: a final state in accounting. Without
    it (accounting unreadable, no record yet, or a record still pending or running) the job stays as
    it is — holding its GPUs if it held any — until Slurm says how it ended."""
    try:
        records = {int(r.job_id): r for r in backend.history([j.slurm_job_id for j in missing])}
    except SlurmError as exc:
        for job in missing:
            _unseen(session, rec, job, f"its accounting cannot be read ({exc})")
        return
    for job in missing:
        acct = records.get(job.slurm_job_id)
        if acct is not None and phase(acct.state) not in ("pending", "running"):
            finish(session, rec, job, phase(acct.state), acct, f"Slurm accounting says {acct.state}")
        elif acct is not None:
            _unseen(session, rec, job, f"its accounting still says {acct.state}")
        else:
            _unseen(session, rec, job, "its accounting has no record of it yet")


def _unseen(session: Session, rec: Recorder, job: Job, why: str) -> None:
    msg = f"Slurm no longer lists it and {why}; kept as it is until Slurm reports how it ended"
    if job.reason != msg:
        job.reason = msg
        rec.event(session, job, "unseen", msg)


def reopen(session: Session, rec: Recorder, job: Job, sj: SlurmJob) -> None:
    """A job closed although Slurm still runs or queues it (closed by mistake, or requeued by an admin
    after it ended): it is followed again from the state Slurm gives it."""
    was = job.state
    job.state = "queued"
    job.intent = None
    job.end_time = None
    job.exit_code = None
    job.meets_qos = None
    job.reason = None
    rec.event(session, job, "reopened", f"Slurm lists it again ({sj.state}) after it was closed as {was}")
