"""Bring the ledger's unfinished jobs up to date with Slurm and add the jobs Slurm has that it lacks."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import Observation, phase, to_utc
from hivebatch.controller.reconcile.machine import finish, follow, follow_foreign, start
from hivebatch.controller.reconcile.slurm_view import gpus_of, shard_placement
from hivebatch.controller.record import Recorder, placement_text
from hivebatch.db.models import FINAL_STATES, Job
from hivebatch.request import JobRequest
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import AcctRecord, SlurmError, SlurmJob


def _request_dict(req: JobRequest) -> dict[str, Any]:
    return {k: v for k, v in asdict(req).items() if v is not None}


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
        job.request = _request_dict(req)
        job.gpus = req.gpus
        job.gpu_type = req.gpu_type
    return job


def _known_final(session: Session, ids: list[int]) -> set[int]:
    out: set[int] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        out.update(session.scalars(select(Job.slurm_job_id).where(Job.slurm_job_id.in_(chunk))))
    return out


def _rows_for_unknown(session: Session, obs: Observation, known: dict[int, Job]) -> list[Job]:
    """New rows for the Slurm jobs the ledger lacks: hsub jobs still alive, and GPU users not from hsub."""
    unknown = [jid for jid in obs.jobs if jid not in known]
    already_final = _known_final(session, unknown) if unknown else set()
    rows: list[Job] = []
    for jid in unknown:
        if jid in already_final:
            continue
        sj = obs.jobs[jid]
        req = JobRequest.from_comment(sj.comment)
        ph = phase(sj.state)
        if req is None and not (ph == "running" and gpus_of(sj)):
            continue  # not hivebatch's and not using GPUs: none of our business
        if req is not None and ph not in ("pending", "running"):
            continue  # an hsub job that came and went between two cycles; accounting has it
        rows.append(_new_job(sj, req, obs.now))
    return rows


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


def sync_jobs(session: Session, obs: Observation, rec: Recorder, backend: SlurmBackend) -> Ledger:
    """Bring every unfinished ledger row up to date with Slurm, add the jobs Slurm has that the ledger lacks."""
    rows = session.scalars(select(Job).where(Job.state.notin_(FINAL_STATES))).all()
    jobs = {j.slurm_job_id: j for j in rows}
    ledger = Ledger(jobs=jobs, slurm=obs.jobs)
    new_rows = _rows_for_unknown(session, obs, jobs)
    if new_rows:
        session.add_all(new_rows)
        session.flush()
    for job in new_rows:
        jobs[job.slurm_job_id] = job
        _introduce(session, rec, job, obs.jobs[job.slurm_job_id], obs.now)

    missing: list[Job] = []
    for jid, job in list(jobs.items()):
        sj = obs.jobs.get(jid)
        if sj is None:
            missing.append(job)
        elif job.foreign:
            follow_foreign(session, rec, job, sj, phase(sj.state))
        else:
            follow(session, rec, ledger, job, sj, phase(sj.state), backend)
    if missing:
        resolve_missing(session, rec, missing, backend)
    for job in missing:
        jobs.pop(job.slurm_job_id, None)
    for jid in [j for j, row in jobs.items() if row.state in FINAL_STATES]:
        jobs.pop(jid)
    return ledger


def resolve_missing(session: Session, rec: Recorder, missing: list[Job], backend: SlurmBackend) -> None:
    """Jobs Slurm no longer lists: their final state comes from accounting when it has them."""
    records: dict[int, AcctRecord] = {}
    try:
        for r in backend.history([j.slurm_job_id for j in missing]):
            records[int(r.job_id)] = r
    except SlurmError:
        records = {}
    for job in missing:
        acct = records.get(job.slurm_job_id)
        if acct is not None:
            ph = phase(acct.state)
            state = ph if ph not in ("pending", "running") else "failed"
            finish(session, rec, job, state, acct, f"Slurm accounting says {acct.state}")
        else:
            finish(session, rec, job, "failed", None, "no longer known to Slurm and not in its accounting")
