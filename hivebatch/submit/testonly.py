"""``hsub --test-only``: where and when the job would start if the controller decided now.

It runs the controller's own ``decide`` (every step: eligibility, arrays, requeued jobs first, the
policy round, predicted starts) on a copy of the cell state the controller last recorded (or rebuilt
from Slurm), with the jobs already waiting and this one, so the answer is the one the controller
would give — nothing is written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from hivebatch.controller.decide import Decisions, decide
from hivebatch.controller.ledger import Ledger
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest, request_of
from hivebatch.slurm.types import SlurmError, SlurmJob, SlurmNode
from hivebatch.state.ledger import JOB_COLUMNS
from hivebatch.submit.build import Submission

TEST_SID = 0  # Slurm never uses job id 0: it cannot clash with a queued job
TEST_ID = str(TEST_SID)


@dataclass
class Prediction:
    result: str  # placed | waiting | rejected
    placement: dict[str, list[int]] = field(default_factory=dict)
    shape: tuple[int, int] | None = None
    preempted: list[str] = field(default_factory=list)
    predicted_start: dt.datetime | None = None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    reason: str | None = None
    source: str = ""
    ahead: int = 0  # waiting jobs the policy starts before this one
    label: str | None = None  # a GPU slice's placement: "node2:[3] 8G/32G"


def _job(row: Any) -> Job:
    """A ledger row as the transient Job the controller's steps read (never added to a session)."""
    return Job(**{c: getattr(row, c, None) for c in JOB_COLUMNS})


def _held_record(job: Job, req: JobRequest) -> SlurmJob:
    """The Slurm record of a waiting job as the controller sees it: held, carrying its request."""
    return SlurmJob(
        job_id=job.slurm_job_id,
        name=job.name or "",
        user=job.user or "",
        account=req.vc,
        qos=req.qos,
        state="PENDING",
        reason="JobHeldAdmin",
        held=True,
        admin_comment=req.to_admin_comment(),
        submit_time=job.submit_time,
        time_limit_s=req.time_limit_s,
    )


def _request(row: Job) -> JobRequest | None:
    try:
        return JobRequest(**row.request) if row.request else None
    except (TypeError, HivebatchError):
        return None


def decide_with(
    ctx: Any,
    rows: list[Any],
    alloc: Any,
    req: JobRequest,
    now: dt.datetime,
    nodes: dict[str, SlurmNode] | None = None,
) -> Decisions:
    """The controller's own ``decide`` over the ledger's jobs and this one request, on ``alloc`` (and
    ``nodes`` as Slurm lists them, with their reservations, when Slurm answered)."""
    jobs = {r.slurm_job_id: _job(r) for r in rows if not r.foreign}
    mine = Job(slurm_job_id=TEST_SID, name="test-only", state="queued", foreign=False, vc_name=req.vc,
               qos=req.qos, priority=req.priority, gpus=req.gpus, gpu_type=req.gpu_type, submit_time=now,
               preemptions=0, request={k: v for k, v in asdict(req).items() if v is not None})  # fmt: skip
    jobs[TEST_SID] = mine
    slurm = {}
    for job in jobs.values():
        waiting_req = _request(job) if job.state in ("queued", "preempted") and job.intent is None else None
        if waiting_req is not None:
            slurm[job.slurm_job_id] = _held_record(job, waiting_req)
    return decide(ctx, Ledger(jobs=jobs, slurm=slurm, alloc=alloc, nodes=nodes or {}), now)


def predict(sub: Submission, now: dt.datetime | None = None) -> Prediction:
    from hivebatch.controller.context import load_context
    from hivebatch.sharing.integration import is_slice
    from hivebatch.state.ledger import read_ledger
    from hivebatch.state.rebuild import reader_allocator

    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    ctx = load_context(sub.config_path)
    ledger = read_ledger(sub.config_path, sub.config, want_cells=True)
    alloc, source = reader_allocator(ctx.spec, ledger.snapshot, ledger.snapshot_time)
    req = sub.request
    if is_slice(ctx.spec, req.gpus, req.gpu_mem_mib, req.gpu_type):
        return predict_slice(ctx, req, alloc, source, now)
    out = decide_with(ctx, ledger.jobs, alloc, req, now, _nodes())
    others = [p for p in out.places if p.job.slurm_job_id != TEST_SID]
    for i, p in enumerate(out.places):
        if p.job.slurm_job_id == TEST_SID:
            return Prediction(result="placed", placement={n: sorted(g) for n, g in p.placement.items()},
                              shape=p.shape, preempted=[str(v) for v in p.preempts], predicted_start=now,
                              predicted_end=p.predicted_end, slack_s=p.slack_s, source=source,
                              ahead=sum(1 for q in out.places[:i] if q.job.slurm_job_id != TEST_SID))  # fmt: skip
    for w in out.waits:
        if w.job.slurm_job_id == TEST_SID:
            # against its predicted end, as hq shows a waiting job's slack (the round's is as if it started now)
            slack = (w.ect - w.predicted_end).total_seconds() if w.ect and w.predicted_end else w.slack_s
            return Prediction(result="rejected" if w.rejected else "waiting", shape=w.shape,
                              predicted_start=w.predicted_start, predicted_end=w.predicted_end,
                              slack_s=slack, reason=w.reason, source=source, ahead=len(others))  # fmt: skip
    return Prediction(result="waiting", reason="the policy chose not to start it now", source=source)


def _nodes() -> dict[str, SlurmNode] | None:
    """The nodes and their reservations (a maintenance window a long job would run into), or None when
    Slurm does not answer: the cell state alone then."""
    from hivebatch.controller.observe import list_nodes
    from hivebatch.slurm import get_backend

    try:
        return list_nodes(get_backend())
    except SlurmError:
        return None


def predict_slice(ctx: Any, req: JobRequest, alloc: Any, source: str, now: dt.datetime) -> Prediction:
    """A GPU slice: the controller's binpack over the slices Slurm runs now (queued slices ignored)."""
    from hivebatch.sharing import SHARD_MIB
    from hivebatch.sharing.integration import HeldSlice, rebuild_ledger
    from hivebatch.slurm import get_backend

    held: list[HeldSlice] = []
    for j in get_backend().list_jobs():
        other = request_of(j)
        if other is None or str(j.state).upper() not in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"):
            continue
        shards = [(n, g, c) for n, per in (j.shards or {}).items() for g, c in per.items() if c]
        if len(shards) == 1:
            node, gpu, count = shards[0]
            held.append(HeldSlice(str(j.job_id), other.vc, other.priority, node, int(gpu), count * SHARD_MIB))
    led, failed = rebuild_ledger(alloc, ctx.spec, ctx.data, held, downgrade=True)
    for h, _why in failed:  # a GPU whose slices cannot be booked stays busy, as in the controller
        with contextlib.suppress(Exception):
            alloc.occupy_foreign(f"slice:{h.job_id}@{h.node}", h.node, [h.gpu])
    d = led.place(TEST_ID, req.vc, int(req.gpu_mem_mib or 0), req.priority, req.gpu_type)
    if d.result != "placed":
        return Prediction(result=d.result, reason=d.reason or d.error, source=source)
    limit = req.time_limit_s or getattr(ctx.platform, "default_time_limit_s", None)
    return Prediction(
        result="placed",
        placement=d.placement,
        shape=(1, 1),
        preempted=list(d.preempted),
        predicted_start=now,
        predicted_end=now + dt.timedelta(seconds=float(limit)) if limit else None,
        source=source,
        label=d.describe(),
    )


def _when(t: dt.datetime | None, now: dt.datetime) -> str:
    if t is None:
        return "unknown"
    local = t.replace(tzinfo=dt.UTC).astimezone()
    delta = (t - now).total_seconds()
    if abs(delta) < 60:
        return f"now ({local:%H:%M:%S})"
    return (
        f"{local:%Y-%m-%d %H:%M:%S} (in {int(delta // 60)} min)"
        if delta > 0
        else f"{local:%Y-%m-%d %H:%M:%S}"
    )


def render_prediction(sub: Submission, pred: Prediction, now: dt.datetime | None = None) -> str:
    from hivebatch.sharing import format_mib
    from hivebatch.state.formats import format_placement, format_slack

    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    req = sub.request
    what = f"{req.gpus} GPU{'s' if req.gpus != 1 else ''} in VC {req.vc}, class {req.qos}"
    lines = []
    if pred.result == "placed":
        shape = f" as {pred.shape[0]} node × {pred.shape[1]} GPUs" if pred.shape else ""
        if pred.label:
            what, shape = (
                f"a GPU slice of {format_mib(req.gpu_mem_mib or 0)} in VC {req.vc}, class {req.qos}",
                "",
            )
        where = pred.label or format_placement(pred.placement)
        lines.append(f"hsub: test only: {what} would start now on {where}{shape}")
        if pred.preempted:
            lines.append(f"  it would preempt (requeue) job(s) {', '.join(pred.preempted)}")
    elif pred.result == "waiting":
        lines.append(f"hsub: test only: {what} would wait: {pred.reason}")
        if pred.ahead:
            lines.append(f"  {pred.ahead} waiting job(s) would start before it")
    else:
        lines.append(f"hsub: test only: {what} would be rejected: {pred.reason}")
    lines.append(f"  predicted start: {_when(pred.predicted_start, now)}")
    if pred.predicted_end is not None:
        lines.append(f"  predicted finish: {_when(pred.predicted_end, now)}")
    if pred.slack_s is not None:
        lines.append(f"  slack before its expected completion time: {format_slack(pred.slack_s)}")
    lines.append(f"  (cell state from {pred.source}; nothing was submitted)")
    return "\n".join(lines)
