"""A decide Round built by hand: the lab config, an allocator, and ledger rows that need no database."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from pathlib import Path

from controller_support import CONFIG

from hivebatch.cells import CellAllocator
from hivebatch.controller.context import ControllerContext, load_context
from hivebatch.controller.decide import Round
from hivebatch.controller.ledger import Ledger
from hivebatch.db.models import Job
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

NOW = dt.datetime(2026, 11, 16, 9, 0)


def context(tmp_path: Path) -> ControllerContext:
    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text(CONFIG)
    return load_context(cfg)


def row(jid: int, req: JobRequest, state: str = "queued", **fields: object) -> Job:
    """A ledger row of an hsub job, not in any session."""
    job = Job(
        slurm_job_id=jid,
        state=state,
        foreign=False,
        vc_name=req.vc,
        qos=req.qos,
        priority=req.priority,
        request={k: v for k, v in asdict(req).items() if v is not None},
        gpus=req.gpus,
        gpu_type=req.gpu_type,
        submit_time=NOW - dt.timedelta(minutes=60 - jid % 60),
        preemptions=0,
    )
    for k, v in fields.items():
        setattr(job, k, v)
    return job


def slurm_job(job: Job, held: bool = True, state: str = "PENDING") -> SlurmJob:
    return SlurmJob(
        job_id=job.slurm_job_id,
        name="j",
        user="alice",
        account=job.vc_name or "",
        qos=job.qos or "",
        state=state,
        reason="JobHeldUser" if held else "",
        held=held,
    )


def make_round(ctx: ControllerContext, jobs: list[Job], alloc: CellAllocator | None = None) -> Round:
    ledger = Ledger(
        jobs={j.slurm_job_id: j for j in jobs},
        slurm={j.slurm_job_id: slurm_job(j) for j in jobs},
        alloc=alloc or CellAllocator(ctx.spec),
    )
    return Round.start(ctx, ledger, NOW)
