"""How long a simulated job runs on the placement it got.

Model jobs: the performance model's latency Lat(t, s) for the shape of the placement (plus the
start-up overhead), so a worse placement really runs slower.

Trace jobs (a GPU count and a duration, no batch/iterations): the duration is taken as the run time
on the *tightest* placement of that GPU count (one node when it fits, else the fewest nodes with
equal GPUs each). Each trace job gets a model type (the trace's model name if the profile store
knows it or a similar one, else one chosen by a hash of the job id) and a representative batch of 64
samples per GPU; a placement s then runs ``duration * Lat(s) / Lat(tightest)``.

An asymmetric placement (quota mode spreads a job without a node count over free GPUs) of n GPUs
on k nodes runs as the symmetric k x floor(n/k) shape, i.e. as fast as its smallest per-node share allows, and never
faster than the best symmetric n-GPU shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hivebatch.qos import ModelRangeError, Shape, latency
from hivebatch.sim.workload import PAPER_MODELS, SimJob, stable_fraction

LOCAL_BATCH_FOR_TRACE_JOBS = 64
_REF_ITERS = 1000.0


def symmetric_shapes(gpus: int, gpus_per_node: int, max_nodes: int) -> list[Shape]:
    """All <d_node, d_gpn> with d_node*d_gpn == gpus that the cluster shape allows, tightest first."""
    out = []
    for d_gpn in range(min(gpus, gpus_per_node), 0, -1):
        if gpus % d_gpn == 0 and gpus // d_gpn <= max_nodes:
            out.append(Shape(gpus // d_gpn, d_gpn))
    return out


def tightest_shape(gpus: int, gpus_per_node: int, max_nodes: int) -> Shape:
    shapes = symmetric_shapes(gpus, gpus_per_node, max_nodes)
    if shapes:
        return shapes[0]
    # an odd count that cannot be split evenly: ceil over the fewest nodes (same as the cell core refuses)
    nodes = -(-gpus // gpus_per_node)
    return Shape(nodes, -(-gpus // nodes))


def placement_shape(placement: dict[str, list[int]]) -> Shape:
    """The symmetric shape a (possibly asymmetric) placement runs like: k nodes x the smallest share."""
    counts = [len(g) for g in placement.values() if g]
    return Shape(len(counts), min(counts))


@dataclass
class ModelChoice:
    profile: Any
    note: str | None


class RuntimeModel:
    """Run times of model and trace jobs, from one profile store and one platform."""

    def __init__(
        self, store: Any, gpus_per_node: int, max_nodes: int, overhead_s: float, gpu_type: str | None
    ):
        self.store = store
        self.gpus_per_node = gpus_per_node
        self.max_nodes = max_nodes
        self.overhead_s = overhead_s
        self.gpu_type = gpu_type
        self.notes: set[str] = set()
        self._cache: dict[tuple[str, str | None], ModelChoice] = {}
        self._lat_cache: dict[tuple[int, float, float, int, int], float] = {}

    # -- profiles -------------------------------------------------------------------------------
    def profile(self, model: str, gpu_type: str | None = None) -> Any:
        key = (model, gpu_type or self.gpu_type)
        if key not in self._cache:
            prof, note = self.store.get(model, gpu_type=key[1], like=None)
            if note:
                self.notes.add(note)
            self._cache[key] = ModelChoice(prof, note)
        return self._cache[key].profile

    def profile_for(self, job: SimJob) -> Any:
        """The job's own model if the store has it (or a similar one), else one chosen by hash."""
        if job.model:
            try:
                return self.profile(job.model, job.gpu_type)
            except Exception:  # noqa: BLE001 - an unknown model falls back to a hashed choice below
                pass
        names = PAPER_MODELS
        pick = names[int(stable_fraction("model:" + job.job_id) * len(names))]
        return self.profile(pick, job.gpu_type)

    # -- latencies ------------------------------------------------------------------------------
    def _latency(self, prof: Any, batch: float, iters: float, shape: Shape) -> float:
        # Profiles live as long as the store (held by self._cache), so id() is a stable key.
        key = (id(prof), float(batch), float(iters), shape.d_node, shape.d_gpn)
        hit = self._lat_cache.get(key)
        if hit is None:
            hit = latency(prof, batch, iters, shape, 0.0)
            if len(self._lat_cache) < 200_000:
                self._lat_cache[key] = hit
        return hit

    def model_latency(self, job: SimJob, shape: Shape) -> float:
        """Model jobs: Lat(t, s) with start-up overhead."""
        prof = self.profile_for(job)
        assert job.batch is not None and job.iters is not None
        return self._latency(prof, job.batch, job.iters, shape) + self.overhead_s

    def trace_slowdown(self, job: SimJob, shape: Shape) -> float:
        """Run time on ``shape`` relative to the tightest placement of the job's GPU count."""
        tight = tightest_shape(shape.gpus, self.gpus_per_node, self.max_nodes)
        if shape == tight:
            return 1.0
        prof = self.profile_for(job)
        batch = LOCAL_BATCH_FOR_TRACE_JOBS * job.gpus
        try:
            return self._latency(prof, batch, _REF_ITERS, shape) / self._latency(
                prof, batch, _REF_ITERS, tight
            )
        except ModelRangeError:
            return 1.0

    def run_time(self, job: SimJob, placement: dict[str, list[int]]) -> float:
        shape = placement_shape(placement)
        gpus = sum(len(g) for g in placement.values())
        best = self.best_run_time(job, gpus)
        if job.is_trace_job:
            assert job.duration_s is not None
            t = job.duration_s * self.trace_slowdown(job, shape)
        else:
            t = self.model_latency(job, shape)
        return max(t, best)

    def best_run_time(self, job: SimJob, gpus: int | None = None) -> float:
        """The fastest any symmetric placement allows: of ``gpus`` GPUs if given; else of the job's own
        count for trace jobs and of any count for model jobs."""
        n = gpus or job.gpus
        if job.is_trace_job:
            assert job.duration_s is not None
            tight = tightest_shape(n, self.gpus_per_node, self.max_nodes)
            shapes = symmetric_shapes(n, self.gpus_per_node, self.max_nodes) or [tight]
            return job.duration_s * min(self.trace_slowdown(job, s) for s in shapes)
        return min((lat for _, lat in self._model_latencies(job, gpus)), default=0.0)

    def _model_latencies(self, job: SimJob, gpus: int | None = None) -> list[tuple[Shape, float]]:
        """(shape, latency) of a model job on each shape of ``gpus`` GPUs, or of any GPU count.

        A model job's GPU count is the policy's choice, so without ``gpus`` every shape counts (a
        local batch of at least one sample bounds the GPU count); shapes the model refuses are left out."""
        if gpus is not None:
            shapes = symmetric_shapes(gpus, self.gpus_per_node, self.max_nodes)
        else:
            limit = job.batch or 1
            shapes = [
                Shape(d, g)
                for g in range(1, self.gpus_per_node + 1)
                for d in range(1, min(self.max_nodes, limit // g) + 1)
            ]
        out = []
        for shape in shapes:
            try:
                out.append((shape, self.model_latency(job, shape)))
            except ModelRangeError:
                continue
        return out

    def min_gpu_seconds(self, job: SimJob) -> float:
        """The least GPU time the job can take on any placement: its share of the work bound."""
        if job.is_trace_job:
            return job.gpus * self.best_run_time(job)
        return min((s.gpus * lat for s, lat in self._model_latencies(job)), default=0.0)

    def reference_latency(self, job: SimJob) -> float:
        """The normaliser of "normalised latency": Lat(t, <1,1>) for model jobs, the trace duration
        (run time on the job's original placement) for trace jobs."""
        if job.is_trace_job:
            assert job.duration_s is not None
            return job.duration_s
        return self.model_latency(job, Shape(1, 1))
