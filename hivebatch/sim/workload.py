"""Simulated jobs and the synthetic workloads (the QoS paper's experiment, a large synthetic trace).

A ``SimJob`` is either a *model job* (model type, batch size, iterations: its run time comes from the
performance model for the placement it gets, and a policy may choose its shape) or a *trace job*
(a GPU count and the run time it had on its original placement; see ``hivebatch.sim.runtime``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

CLASSES = ("urgent", "prior", "normal")
# The paper's class mix urgent:prior:normal = 5:35:60.
CLASS_WEIGHTS = (0.05, 0.35, 0.60)

PAPER_MODELS = ("alexnet", "googlenet", "resnet50", "inception3", "lstm", "seq2seq")

# The paper's Table 2 (ranges) is lost; these ranges are ours. Batch sizes are global (split over the
# GPUs of the placement). There are no inference profiles, so an inference job runs on its model's
# training profile with fewer iterations (about 1/3: forward passes only). On the paper's K80 profiles
# the mean single-GPU run time is about 1.2 h, so 10 jobs/h about fill the 16 GPUs, 5 jobs/h half
# fill them and 20 jobs/h overload them.
TRAIN_BATCH = (32, 256)
TRAIN_ITERS = (500, 5000)
INFER_BATCH = (64, 512)
INFER_ITERS = (150, 1500)
# GPUs a user asks for (used by FIFO and by policies that keep the user's GPU count), with weights.
USER_GPUS = (1, 2, 4, 8)
USER_GPU_WEIGHTS = (0.4, 0.3, 0.2, 0.1)


@dataclass
class SimJob:
    job_id: str
    vc: str
    cls: str
    arrival: float
    gpus: int
    model: str | None = None  # model type name, e.g. "resnet50"
    train: bool = True
    batch: int | None = None
    iters: int | None = None
    duration_s: float | None = None  # trace jobs: run time on the tightest placement of ``gpus``
    opportunistic: bool = False
    gpu_type: str | None = None
    checkpoints: bool = False  # saves its work on its preemption notice's signal (a trap)
    user: str | None = None  # whose job (fairshare orders a VC's jobs of one class by user)
    time_limit_s: float | None = None  # trace jobs: the limit the scheduler sees (default: the run time)

    @property
    def is_trace_job(self) -> bool:
        return self.batch is None or self.iters is None


def stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by ``key``: trace jobs get classes and model types by hash, not by RNG."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def class_by_hash(key: str) -> str:
    x = stable_fraction("class:" + key)
    acc = 0.0
    for cls, w in zip(CLASSES, CLASS_WEIGHTS, strict=True):
        acc += w
        if x < acc:
            return cls
    return CLASSES[-1]


def _vc_weights(vc_gpus: dict[str, int]) -> tuple[list[str], np.ndarray]:
    names = sorted(vc_gpus)
    sizes = np.array([max(vc_gpus[v], 0) for v in names], dtype=float)
    if sizes.sum() <= 0:
        sizes = np.ones(len(names))
    return names, sizes / sizes.sum()


def paper_workload(
    rate_per_hour: float,
    hours: float,
    seed: int,
    vc_gpus: dict[str, int],
    opportunistic_fraction: float = 0.0,
) -> list[SimJob]:
    """Poisson arrivals at ``rate_per_hour`` over ``hours``; model, mode, batch and iterations uniform.

    Each job goes to a VC with probability proportional to the VC's GPUs and asks for at most the
    VC's GPUs. Same seed, same jobs.
    """
    rng = np.random.default_rng(seed)
    names, weights = _vc_weights(vc_gpus)
    horizon = hours * 3600.0
    jobs: list[SimJob] = []
    t = 0.0
    mean_gap = 3600.0 / rate_per_hour
    while True:
        t += float(rng.exponential(mean_gap))
        if t >= horizon:
            break
        vc = names[int(rng.choice(len(names), p=weights))]
        model = PAPER_MODELS[int(rng.integers(len(PAPER_MODELS)))]
        train = bool(rng.random() < 0.5)
        lo_b, hi_b = TRAIN_BATCH if train else INFER_BATCH
        lo_i, hi_i = TRAIN_ITERS if train else INFER_ITERS
        batch = int(rng.integers(lo_b, hi_b + 1))
        iters = int(rng.integers(lo_i, hi_i + 1))
        cls = CLASSES[int(rng.choice(3, p=CLASS_WEIGHTS))]
        gpus = int(rng.choice(USER_GPUS, p=USER_GPU_WEIGHTS))
        # a request the VC could never hold is cut to the largest listed count it can
        gpus = max([g for g in USER_GPUS if g <= min(gpus, vc_gpus[vc])], default=1)
        opp = bool(rng.random() < opportunistic_fraction)
        jobs.append(
            SimJob(
                job_id=f"p{len(jobs)}",
                vc=vc,
                cls=cls,
                arrival=t,
                gpus=gpus,
                model=model,
                train=train,
                batch=batch,
                iters=iters,
                opportunistic=opp,
            )
        )
    return jobs


def synthetic_trace(n_jobs: int, seed: int, vc_gpus: dict[str, int], load: float = 0.7) -> list[SimJob]:
    """A large trace-job workload (for benchmarks): Philly-like GPU counts, log-normal durations.

    Arrivals are Poisson with a rate chosen so that the offered load is about ``load`` of all GPUs.
    """
    rng = np.random.default_rng(seed)
    names, weights = _vc_weights(vc_gpus)
    total_gpus = sum(vc_gpus.values())
    gpu_choices = np.array([1, 2, 4, 8, 16])
    gpu_p = np.array([0.70, 0.10, 0.10, 0.08, 0.02])
    gpus = rng.choice(gpu_choices, size=n_jobs, p=gpu_p)
    durations = np.exp(rng.normal(np.log(1800.0), 1.0, size=n_jobs)).clip(60.0, 7 * 86400.0)
    mean_gpu_s = float((gpus * durations).mean())
    rate = load * total_gpus / mean_gpu_s  # jobs per second
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n_jobs))
    vcs = rng.choice(len(names), size=n_jobs, p=weights)
    jobs: list[SimJob] = []
    for i in range(n_jobs):
        vc = names[int(vcs[i])]
        g = int(min(int(gpus[i]), vc_gpus[vc]))
        jid = f"s{i}"
        jobs.append(
            SimJob(
                job_id=jid,
                vc=vc,
                cls=class_by_hash(jid),
                arrival=float(arrivals[i]),
                gpus=max(g, 1),
                duration_s=float(durations[i]),
            )
        )
    return jobs
