"""Workloads inside one VC: a mixed 1/2/8-GPU stream (starvation of large jobs) and two users of
very different appetite (fairshare). Both are trace jobs with a run time and a time limit above it,
as users set them: the scheduler sees only the limit, the simulator runs the true time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hivebatch.sim.setup import node8_config
from hivebatch.sim.workload import SimJob

VC = "lab"
#: GPUs a job of the mixed stream asks for, and how often
MIXED_GPUS = (1, 2, 8)
MIXED_WEIGHTS = (0.6, 0.3, 0.1)


def one_vc_config(nodes: int) -> dict[str, Any]:
    """One VC owning ``nodes`` 8-GPU nodes."""
    return node8_config({VC: nodes})


def time_limit(duration_s: float) -> float:
    """The limit a user asks for: half as much again as the run, rounded up to half an hour."""
    return math.ceil(1.5 * duration_s / 1800.0) * 1800.0


def _duration(rng: np.random.Generator, median_s: float) -> float:
    return float(np.clip(np.exp(rng.normal(math.log(median_s), 0.8)), 300.0, 8 * 3600.0))


def _arrivals(rng: np.random.Generator, rate_per_s: float, horizon_s: float) -> list[float]:
    out: list[float] = []
    t = float(rng.exponential(1.0 / rate_per_s))
    while t < horizon_s:
        out.append(t)
        t += float(rng.exponential(1.0 / rate_per_s))
    return out


def mixed_stream(seed: int, hours: float, gpus: int, load: float = 0.9) -> list[SimJob]:
    """Poisson arrivals of 1-, 2- and 8-GPU jobs (6:3:1) offering ``load`` of the VC's ``gpus``."""
    rng = np.random.default_rng(seed)
    median_s = 2400.0
    mean_s = median_s * math.exp(0.8**2 / 2)  # of the log-normal (clipping aside)
    mean_gpus = sum(g * w for g, w in zip(MIXED_GPUS, MIXED_WEIGHTS, strict=True))
    rate = load * gpus / (mean_gpus * mean_s)
    jobs: list[SimJob] = []
    for i, t in enumerate(_arrivals(rng, rate, hours * 3600.0)):
        g = int(rng.choice(MIXED_GPUS, p=MIXED_WEIGHTS))
        d = _duration(rng, median_s)
        jobs.append(
            SimJob(f"m{i}", VC, "normal", t, g, duration_s=d, time_limit_s=time_limit(d), user=f"u{i % 7}")
        )
    return jobs


def two_users(seed: int, hours: float, gpus: int, load: float = 1.1) -> list[SimJob]:
    """A heavy user sending nine jobs in ten, a light user the tenth, 1- and 2-GPU jobs of one class.

    The VC is a little overloaded, so a queue forms and its order decides who waits.
    """
    rng = np.random.default_rng(seed)
    median_s = 1800.0
    mean_s = median_s * math.exp(0.8**2 / 2)
    rate = load * gpus / (1.5 * mean_s)
    jobs: list[SimJob] = []
    for i, t in enumerate(_arrivals(rng, rate, hours * 3600.0)):
        user = "light" if rng.random() < 0.1 else "heavy"
        g = int(rng.choice((1, 2)))
        d = _duration(rng, median_s)
        jobs.append(SimJob(f"f{i}", VC, "normal", t, g, duration_s=d, time_limit_s=time_limit(d), user=user))
    return jobs
