"""A decide Round built by hand: the lab config, an allocator, and ledger rows that need no database."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, replace
from pathlib import Path

from controller_support import CONFIG

from hivebatch.cells import CellAllocator
from hivebatch.controller.context import ControllerContext, load_context
from hivebatch.controller.decide import Round
from hivebatch.controller.decide.classify import classify
from hivebatch.controller.decide.policy_round import run_policy_round
from hivebatch.controller.decide.room import screen_hopeless
from hivebatch.controller.decide.settle import attach_notes
from hivebatch.controller.ledger import Ledger
from hivebatch.db.models import Job
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob, SlurmNode

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


NODES = ("node1", "node2", "node3", "node4")


def decided(ctx, req: JobRequest, nodes_kw: dict[str, object] | None = None, **asks: object):  # type: ignore[no-untyped-def]
    """One held job 1 through classify, the screen and the policy round, on four idle 16-CPU nodes
    (``asks``: its squeue record's fields; ``nodes_kw``: what else the nodes have)."""
    job = row(1, req)
    r = make_round(ctx, [job])
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], **asks)
    r.ledger.nodes = {
        n: replace(
            SlurmNode(
                name=n,
                state="IDLE",
                bad=False,
                gpu_indices=list(range(8)),
                partitions=["gpu"],
                features=["v100"],
                cpus=16,
                cpus_free=16,
                mem_mb=64000,
                mem_free_mb=64000,
            ),
            **(nodes_kw or {}),
        )  # fmt: skip
        for n in NODES
    }
    classify(r)
    screen_hopeless(r)
    run_policy_round(r)
    attach_notes(r)
    return r
