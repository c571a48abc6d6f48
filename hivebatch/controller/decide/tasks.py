"""A job's request as the QoS model's task: its shape, its profile, its predicted latency."""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING

from hivebatch.bounds import slurm_time_limit
from hivebatch.cells import ClusterSpec
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide.times import epoch, from_epoch
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.qos import Profile, Shape, Task, task_ect, task_latency
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

if TYPE_CHECKING:
    from hivebatch.controller.decide.types import Round

ProfileHit = tuple[Profile | None, str | None]  # (profile, a note saying what stood in, or why none)
Prediction = tuple[float | None, dt.datetime | None, float | None]  # (latency s, ECT, slack s)


def gpus_per_node(spec: ClusterSpec, gpu_type: str | None) -> int:
    return int(spec.gpus_per_node(gpu_type or spec.gpu_types[0]))


def default_shape(req: JobRequest, spec: ClusterSpec) -> tuple[int, int] | None:
    """The shape a request fixes, or the cells' default for a plain job; None lets the QoS model choose."""
    if req.nodes:
        return (req.nodes, req.gpus // req.nodes) if req.gpus % req.nodes == 0 else None
    if req.gpus_per_node:
        return (req.gpus // req.gpus_per_node, req.gpus_per_node)
    return None


def plain_shape(gpus: int, gpn: int) -> tuple[int, int] | None:
    if gpus <= gpn:
        return (1, gpus)
    for n in range(math.ceil(gpus / gpn), gpus + 1):
        if gpus % n == 0 and gpus // n <= gpn:
            return (n, gpus // n)
    return None


class TaskBuilder:
    """JobRequest → qos.Task, with one profile look-up per (model, GPU type, like).

    ``now`` stands in for the arrival of a job without a submit time. ``notes`` collects, per Slurm
    job id, what the profile store said about the job's model (another profile stood in, or none
    did and the job is planned as a plain job), so the job's owner is told.
    """

    def __init__(self, ctx: ControllerContext, now: dt.datetime) -> None:
        self.ctx = ctx
        self.now = now
        self.notes: dict[int, str] = {}
        self._profiles: dict[tuple[str, str, str | None], ProfileHit] = {}

    def profile(self, req: JobRequest) -> ProfileHit:
        if not req.model or self.ctx.profiles is None:
            return None, None
        gpu_type = req.gpu_type or self.ctx.spec.gpu_types[0]
        key = (req.model, gpu_type, req.like)
        if key not in self._profiles:
            try:
                self._profiles[key] = self.ctx.profiles.get(req.model, gpu_type=gpu_type, like=req.like)
            except HivebatchError as exc:
                self._profiles[key] = (None, f"{exc}; planned as a plain job")
            except Exception as exc:  # noqa: BLE001 - UnknownModelError may not subclass HivebatchError
                self._profiles[key] = (None, f"{exc}; planned as a plain job")
        return self._profiles[key]

    def task(
        self, job: Job, req: JobRequest, time_limit_s: int | None, nice: int = 0, sj: SlurmJob | None = None
    ) -> Task:
        """``time_limit_s``: Slurm's limit of the job, else the one the request names; ``nice``: Slurm's;
        ``sj``: Slurm's record of it, for its order among jobs alike (an array's tasks by index)."""
        spec = self.ctx.spec
        prof, note = self.profile(req)
        if note:
            self.notes[job.slurm_job_id] = note
        shape = default_shape(req, spec)
        usable_model = prof is not None and req.batch_size is not None and req.iters is not None
        if shape is None and not usable_model:
            shape = plain_shape(req.gpus, gpus_per_node(spec, req.gpu_type))
        # Slurm's limit first: its owner may have lowered it since submitting (scontrol update TimeLimit=)
        time_limit = slurm_time_limit(time_limit_s or req.time_limit_s, self.ctx.limits)
        return Task(
            job_id=str(job.slurm_job_id),
            vc=req.vc,
            cls=req.qos,
            arrival=epoch(job.submit_time or self.now),
            model=prof if usable_model else None,
            batch=req.batch_size if usable_model else None,
            iters=req.iters if usable_model else None,
            gpus=req.gpus,
            shape=Shape(*shape) if shape else None,
            time_limit_s=float(time_limit) if time_limit else None,
            gpu_type=req.gpu_type,
            user=job.user,
            nice=nice,
            slurm_order=slurm_order(sj) if sj is not None else (job.slurm_job_id, -1),
            shown=sj.display_id if sj is not None else None,
        )


def slurm_order(sj: SlurmJob) -> tuple[int, int]:
    """Slurm's order among jobs of equal priority and submit time: the array's job id (a plain
    job's own), then the task's index."""
    if sj.array_job_id is not None and sj.array_task_id is not None:
        return (sj.array_job_id, sj.array_task_id)
    return (sj.job_id, -1)


def start_prediction(
    r: Round, job: Job, req: JobRequest, sj: SlurmJob | None, shape: Shape | None
) -> Prediction:
    """(latency s, ECT, slack s) of the job started now on ``shape`` (None: the shape its request
    fixes, else the plain one): its model's run, else its time limit, else the platform's default.
    All None when nothing can be predicted (its numbers overflow the model …)."""
    platform = r.ctx.platform
    try:
        task = r.builder.task(job, req, sj.time_limit_s if sj else None, sj.nice if sj else 0, sj)
        plain = plain_shape(req.gpus, gpus_per_node(r.ctx.spec, req.gpu_type)) or (1, 1)
        lat = float(task_latency(task, shape or task.shape or Shape(*plain), platform))
        ect = from_epoch(task_ect(task, platform))
    except Exception:  # noqa: BLE001 - no prediction possible: the caller goes on without figures
        return None, None, None
    slack = (ect - r.now).total_seconds() - lat if ect is not None else None
    return lat, ect, slack


def predicted_latency(task: Task, shape: Shape | None, ctx: ControllerContext) -> float | None:
    """Seconds the task runs on ``shape`` by its model, else its time limit, else unknown."""
    from hivebatch.qos import latency

    if task.model is not None and shape is not None and task.batch is not None and task.iters is not None:
        try:
            return float(latency(task.model, task.batch, task.iters, shape, ctx.platform.overhead_s))
        except Exception:  # noqa: BLE001 - a shape outside the model's range: fall back to the time limit
            pass
    return float(task.time_limit_s) if task.time_limit_s else None
