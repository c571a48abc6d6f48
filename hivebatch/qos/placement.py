"""QoS side of the model: ECT classes, cost, CER, candidate placements and the CER-max choice.

Formulas (numbers as in the paper / design/qos-model.md):
  (9)  e_t = a_t + c_class · Lat(t, <1,1>)       c_urgent = 0, c_prior = 1, c_normal = 2
  (10) Cost(s) = n/(N·G) + θ · d_node/N
  (11) CER(t, s) = PR(t, s) / Cost(s)
  (15) M' = {s in M : t_now + Lat(t, s) <= e_t};  s* = argmax CER over M', else over M
  (16) slack w = e_t − (t_now + Lat(t, s*))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hivebatch.errors import ConfigError, HivebatchError
from hivebatch.node_room import NodeNeeds
from hivebatch.qos.perfmodel import (
    ModelRangeError,
    Profile,
    Shape,
    latency,
    predict_throughput,
    throughput_grid,
)

DEFAULT_TIME_LIMIT_S = 3600.0


@dataclass(frozen=True)
class ClassCoefficients:
    """ECT multipliers per QoS class; opportunistic work waits like normal work unless configured."""

    urgent: float = 0.0
    prior: float = 1.0
    normal: float = 2.0
    opportunistic: float = 2.0

    def of(self, cls: str) -> float:
        value = getattr(self, cls, None) if cls in ("urgent", "prior", "normal", "opportunistic") else None
        if value is None:
            raise HivebatchError(f"unknown QoS class {cls!r} (use urgent, prior, normal or opportunistic)")
        return float(value)

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> ClassCoefficients:
        data = dict(data or {})
        unknown = set(data) - {"urgent", "prior", "normal", "opportunistic"}
        if unknown:
            raise ConfigError(
                f"qos.classes: unknown class {sorted(unknown)[0]!r} (use urgent, prior, normal, opportunistic)"
            )
        values: dict[str, float] = {}
        for k, v in data.items():
            try:
                values[k] = float(v)
            except (TypeError, ValueError):
                raise ConfigError(f"qos.classes.{k}: must be a number >= 0 (got {v!r})") from None
            if values[k] < 0 or not math.isfinite(values[k]):
                raise ConfigError(f"qos.classes.{k}: must be a number >= 0 (got {v!r})")
        if "normal" in values and "opportunistic" not in values:
            values["opportunistic"] = values["normal"]
        return cls(**values)


@dataclass(frozen=True)
class Platform:
    """P = <N, G, Comm>: the cluster shape the policies plan for, plus the QoS knobs.

    ``respect_user_gpus``: when true the model-driven policies keep a task's requested GPU count
    (choosing only its arrangement); by default they choose the count, as in the paper.
    ``max_shapes``: a plan lists at most this many shapes (best first), so a large cluster does
    not make the allocator try thousands of placements for a task that fits nowhere now.
    ``keep_free_gpus``: GPUs of a VC the qos policy's idle-GPU guard leaves free for arrivals
    (None: one node's, ``gpus_per_node``).
    """

    max_nodes: int
    gpus_per_node: int
    theta: float = 0.5
    overhead_s: float = 30.0
    classes: ClassCoefficients = field(default_factory=ClassCoefficients)
    default_time_limit_s: float = DEFAULT_TIME_LIMIT_S
    respect_user_gpus: bool = False
    max_shapes: int | None = 8  # length cap of a plan's preference list (the allocator tries each)
    keep_free_gpus: int | None = None

    def __post_init__(self) -> None:
        if self.max_nodes < 1 or self.gpus_per_node < 1:
            raise HivebatchError(
                f"platform needs >= 1 node and >= 1 GPU per node (got {self.max_nodes}x{self.gpus_per_node})"
            )
        if self.theta < 0 or self.overhead_s < 0:
            raise HivebatchError("platform theta and start-up overhead must be >= 0")
        if self.keep_free_gpus is not None and self.keep_free_gpus < 0:
            raise HivebatchError(f"platform keep_free_gpus must be >= 0 (got {self.keep_free_gpus})")

    @property
    def kept_free(self) -> int:
        """GPUs per VC the idle-GPU guard leaves free for arrivals."""
        return self.gpus_per_node if self.keep_free_gpus is None else self.keep_free_gpus


@dataclass
class Task:
    """A waiting task as the policies see it. ``model`` None = plain job: duration = time_limit_s."""

    job_id: str
    vc: str
    cls: str
    arrival: float
    model: Profile | None = None
    batch: int | None = None
    iters: int | None = None
    gpus: int | None = None
    shape: Shape | None = None
    time_limit_s: float | None = None
    gpu_type: str | None = None
    weight: float = 1.0
    avoid_nodes: frozenset[str] = frozenset()  # nodes the task cannot use (passed on to the cells)
    # what it needs of each node besides GPUs (None: nothing the round counts; hivebatch.node_room)
    node_needs: NodeNeeds | None = None
    user: str | None = None  # whose job: fairshare orders a VC's jobs of one class by user
    nice: int = 0  # Slurm's nice: a positive one lets the VC's other jobs of its class go first
    # Slurm's order among jobs alike in everything else: the array's job id (a plain job's own) and
    # the task's index, so an array's tasks start in index order (sort_job_queue2 in job_scheduler.c)
    slurm_order: tuple[int, int] | None = None
    shown: str | None = None  # the job as its owner sees it (an array's task as 1948_0); None: job_id

    @property
    def name(self) -> str:
        """The job as reasons name it to its owner."""
        return self.shown or self.job_id

    @property
    def tie(self) -> tuple[int, int, str]:
        """The last key of every queue order: Slurm's order where known, then the job id."""
        return (*(self.slurm_order or (0, 0)), self.job_id)

    def __post_init__(self) -> None:
        if self.model is not None and (
            not self.batch or self.batch < 1 or self.iters is None or self.iters < 0
        ):
            raise HivebatchError(f"task {self.job_id}: a task with a model needs batch >= 1 and iters >= 0")
        if self.gpus is not None and self.gpus < 1:
            raise HivebatchError(f"task {self.job_id}: gpus must be >= 1")
        if self.weight <= 0:
            raise HivebatchError(f"task {self.job_id}: weight must be > 0")


def cost(shape: Shape, platform: Platform) -> float:
    """Formula (10): share of all GPUs plus θ times the share of nodes touched."""
    n_total = platform.max_nodes * platform.gpus_per_node
    return shape.gpus / n_total + platform.theta * shape.d_node / platform.max_nodes


def task_latency(task: Task, shape: Shape, platform: Platform) -> float:
    """Lat(t, s) in seconds: the model's prediction, or the plain job's time limit."""
    if task.model is None:
        return float(task.time_limit_s if task.time_limit_s is not None else platform.default_time_limit_s)
    assert task.batch is not None and task.iters is not None
    return latency(task.model, task.batch, task.iters, shape, platform.overhead_s)


def task_throughput(task: Task, shape: Shape) -> float:
    """PR(t, s); a plain job is taken to scale linearly with its GPUs (no model says otherwise)."""
    if task.model is None:
        return float(shape.gpus)
    assert task.batch is not None
    return predict_throughput(task.model, task.batch, shape)


def cer(task: Task, shape: Shape, platform: Platform) -> float:
    """Formula (11): CER = PR / Cost."""
    return task_throughput(task, shape) / cost(shape, platform)


def base_latency(task: Task, platform: Platform) -> float:
    """Lat(t, <1,1>), the normalising single-GPU time (a plain job: its time limit)."""
    return task_latency(task, Shape(1, 1), platform)


def expected_completion(arrival: float, cls: str, base_latency_s: float, classes: ClassCoefficients) -> float:
    """Formula (9): e_t = a_t + c_class · Lat(t, <1,1>)."""
    return arrival + classes.of(cls) * base_latency_s


def task_ect(task: Task, platform: Platform) -> float:
    return expected_completion(task.arrival, task.cls, base_latency(task, platform), platform.classes)


def shapes_for_gpus(gpus: int, platform: Platform) -> list[Shape]:
    """Symmetric arrangements of exactly ``gpus`` GPUs, fewest nodes first."""
    out = []
    for d_node in range(1, platform.max_nodes + 1):
        if gpus % d_node == 0 and gpus // d_node <= platform.gpus_per_node:
            out.append(Shape(d_node, gpus // d_node))
    return out


def _free_choice(task: Task, platform: Platform) -> bool:
    """A model task whose GPU count and arrangement the policy may choose."""
    if task.model is None or task.shape is not None:
        return False
    return not (platform.respect_user_gpus and task.gpus is not None)


@dataclass
class ShapeTable:
    """Every allowed placement of one model task, ranked by CER (desc), then latency, then shape."""

    profile: Profile
    shapes: list[Shape]
    latency: np.ndarray
    throughput: np.ndarray
    cer: np.ndarray


_TABLES: dict[tuple[object, ...], ShapeTable] = {}
_TABLES_MAX = 8192


def shape_table(task: Task, platform: Platform, limit: int | None) -> ShapeTable:
    """Vectorised M_i for a free-choice model task; cached, as it does not depend on the clock."""
    assert task.model is not None and task.batch is not None and task.iters is not None
    key = (id(task.model), task.batch, task.iters, platform, limit)
    hit = _TABLES.get(key)
    if hit is not None and hit.profile is task.model:
        return hit
    cap = (
        platform.max_nodes * platform.gpus_per_node
        if limit is None
        else min(limit, platform.max_nodes * platform.gpus_per_node)
    )
    grid_n, grid_g = np.meshgrid(
        np.arange(1, platform.max_nodes + 1), np.arange(1, platform.gpus_per_node + 1), indexing="ij"
    )
    dn, g = grid_n.ravel(), grid_g.ravel()
    keep = dn * g <= cap
    dn, g = dn[keep], g[keep]
    pr = throughput_grid(task.model, float(task.batch), dn, g)
    ok = ~np.isnan(pr)
    dn, g, pr = dn[ok], g[ok], pr[ok]
    lat = task.batch * task.iters / pr + platform.overhead_s
    n_total = platform.max_nodes * platform.gpus_per_node
    ratio = pr / (dn * g / n_total + platform.theta * dn / platform.max_nodes)
    order = np.lexsort((g, dn, lat, -ratio))
    table = ShapeTable(
        task.model,
        [Shape(int(dn[i]), int(g[i])) for i in order],
        lat[order],
        pr[order],
        ratio[order],
    )
    if len(_TABLES) >= _TABLES_MAX:
        _TABLES.clear()
    _TABLES[key] = table
    return table


def candidate_shapes(task: Task, platform: Platform, limit: int | None = None) -> list[Shape]:
    """M_i: placements the cluster (N x G) and the VC limit allow and the model can answer for.

    A shape the user pinned, or a plain job's GPU count, is the only candidate arrangement; a
    model task may use any shape unless the platform respects user GPU counts.
    """
    if _free_choice(task, platform):
        return sorted(shape_table(task, platform, limit).shapes)
    return user_shapes(task, platform, limit)


def user_shapes(task: Task, platform: Platform, limit: int | None = None) -> list[Shape]:
    """The arrangements of the user's own request (pinned shape, or GPU count packed tightest first)
    that fit the cluster and the VC limit and that the model can answer for."""
    shapes = [task.shape] if task.shape is not None else shapes_for_gpus(task.gpus or 1, platform)
    out = []
    for s in shapes:
        if s.d_node > platform.max_nodes or s.d_gpn > platform.gpus_per_node:
            continue
        if limit is not None and s.gpus > limit:
            continue
        try:
            task_latency(task, s, platform)
            task_throughput(task, s)
        except ModelRangeError:
            continue
        out.append(s)
    return out


@dataclass
class Choice:
    """Per-task result of the QoS-constrained choice, before ordering."""

    shapes: list[Shape]
    latency_s: float
    ect: float
    slack: float
    meets_qos: bool
    reason: str | None = None


def no_shape_reason(task: Task, platform: Platform, limit: int | None) -> str:
    want = str(task.shape) if task.shape else (f"{task.gpus} GPUs" if task.gpus else "any placement")
    if limit is not None and limit < 1:
        return f"VC {task.vc} has no GPUs available to it now"
    bits = [f"cluster {platform.max_nodes}x{platform.gpus_per_node}"]
    if limit is not None:
        bits.append(f"VC {task.vc} limit {limit} GPUs")
    if task.model is not None:
        bits.append(f"batch {task.batch} needs >= 1 sample per GPU")
    return f"no placement for {want} fits ({', '.join(bits)})"


def _cap(shapes: list[Shape], platform: Platform) -> list[Shape]:
    return shapes if platform.max_shapes is None else shapes[: max(1, platform.max_shapes)]


def choose_qos(task: Task, now: float, platform: Platform, limit: int | None = None) -> Choice:
    """s* = argmax CER over the shapes that meet the ECT, else over all (formula 15 + fallback).

    The returned preference list puts QoS-meeting shapes first, each group by CER descending, so
    when s* does not fit right now the allocator tries the next-best shape.
    """
    ect = task_ect(task, platform)
    if _free_choice(task, platform):
        table = shape_table(task, platform, limit)
        if not table.shapes:
            return Choice([], math.inf, ect, -math.inf, False, no_shape_reason(task, platform, limit))
        meets = now + table.latency <= ect
        idx = np.concatenate([np.flatnonzero(meets), np.flatnonzero(~meets)])
        if platform.max_shapes is not None:
            idx = idx[: max(1, platform.max_shapes)]
        first = int(idx[0])
        lat = float(table.latency[first])
        return Choice([table.shapes[int(i)] for i in idx], lat, ect, ect - (now + lat), bool(meets[first]))
    shapes = candidate_shapes(task, platform, limit)
    if not shapes:
        return Choice([], math.inf, ect, -math.inf, False, no_shape_reason(task, platform, limit))
    scored = []
    for s in shapes:
        lat = task_latency(task, s, platform)
        scored.append((now + lat <= ect, cer(task, s, platform), lat, s))
    scored.sort(key=lambda x: (not x[0], -x[1], x[2], x[3]))
    meets0, _, lat, _ = scored[0]
    return Choice(_cap([x[3] for x in scored], platform), lat, ect, ect - (now + lat), bool(meets0))
