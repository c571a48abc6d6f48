"""``hsub --test-only``: where and when the job would start if the controller decided now.

It runs the controller's own round (``hivebatch.scheduler.schedule_round`` with the configured policy)
on a copy of the cell state the controller last recorded (or rebuilt from Slurm), together with the
jobs already waiting, so the answer is the one the controller would give — nothing is written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hivebatch.request import JobRequest, request_of
from hivebatch.submit.build import Submission

TEST_ID = "0"  # Slurm never uses job id 0: it cannot clash with a queued job


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


def _epoch(t: dt.datetime) -> float:
    return t.replace(tzinfo=dt.UTC).timestamp()


def _from_epoch(x: float | None) -> dt.datetime | None:
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None
    return dt.datetime.fromtimestamp(x, dt.UTC).replace(tzinfo=None)


def _waiting_requests(ledger_jobs: list[Any]) -> list[tuple[Any, JobRequest]]:
    out = []
    for j in ledger_jobs:
        if j.foreign or j.state not in ("queued", "preempted") or not j.request:
            continue
        try:
            req = JobRequest(**j.request)
        except TypeError:
            continue
        out.append((j, req))
    return out


def estimate_start(
    ledger_jobs: list[Any], vc: str, gpus: int, free_now: int, now: dt.datetime
) -> dt.datetime | None:
    """When enough of the VC's GPUs free up, from the predicted ends of its running jobs (shape ignored)."""
    ends = sorted(
        (j.predicted_end, j.gpus or 0)
        for j in ledger_jobs
        if j.vc_name == vc
        and j.state in ("placed", "running")
        and j.predicted_end is not None
        and not j.foreign
    )
    free = free_now
    for end, n in ends:
        free += n
        if free >= gpus:
            return max(end, now)
    return None


def predict(sub: Submission, now: dt.datetime | None = None) -> Prediction:
    from hivebatch.controller.context import load_context
    from hivebatch.controller.decide import TaskBuilder
    from hivebatch.scheduler import schedule_round
    from hivebatch.state.ledger import read_ledger
    from hivebatch.state.rebuild import reader_allocator

    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    ctx = load_context(sub.config_path)
    ledger = read_ledger(sub.config_path, sub.config, want_cells=True)
    alloc, source = reader_allocator(ctx.spec, ledger.snapshot, ledger.snapshot_time)

    from hivebatch.sharing.integration import is_slice

    req = sub.request
    if is_slice(ctx.spec, req.gpus, req.gpu_mem_mib, req.gpu_type):
        return predict_slice(ctx, req, alloc, source, now)

    builder = TaskBuilder(ctx, now)
    requests: dict[str, JobRequest] = {}
    tasks = []
    for j, req in _waiting_requests(ledger.jobs):
        tasks.append(builder.task(j, req, None))
        requests[str(j.slurm_job_id)] = req
    mine = SimpleNamespace(slurm_job_id=TEST_ID, submit_time=now, user=None)
    tasks.append(builder.task(mine, sub.request, sub.request.time_limit_s))
    requests[TEST_ID] = sub.request

    outcomes = schedule_round(
        tasks,
        _epoch(now),
        alloc,
        ctx.policy,
        ctx.platform,
        {k for k, r in requests.items() if r.priority < 0},
        priority_of=lambda t: requests[str(t.job_id)].priority,
    )
    ahead = 0
    for o in outcomes:
        if str(o.task.job_id) != TEST_ID:
            ahead += o.result == "placed"
            continue
        shape = (o.shape.d_node, o.shape.d_gpn) if o.shape is not None else None
        pred = Prediction(
            result=o.result,
            placement={n: sorted(g) for n, g in o.placement.items()},
            shape=shape,
            preempted=list(o.preempted),
            predicted_start=_from_epoch(o.predicted_start),
            predicted_end=_from_epoch(o.predicted_end),
            slack_s=o.slack
            if o.slack is not None and o.slack == o.slack and abs(o.slack) != float("inf")
            else None,
            reason=o.reason,
            source=source,
            ahead=ahead,
        )
        if o.result == "waiting" and sub.request.priority >= 0:
            view = alloc.vc_view(sub.request.vc)
            pred.predicted_start = estimate_start(
                ledger.jobs, sub.request.vc, sub.request.gpus, view.gpus_free, now
            )
        return pred
    return Prediction(result="waiting", reason="the policy chose not to start it now", source=source)


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
    led, failed = rebuild_ledger(alloc, ctx.spec, ctx.data, held)
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
