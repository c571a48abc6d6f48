"""A workload that preempts: guaranteed jobs reclaiming their VCs' cells from opportunistic work.

Each VC's guaranteed jobs arrive as a Poisson stream that keeps about ``guaranteed_load`` of its GPUs
busy; opportunistic jobs, from every VC, ask for ``opportunistic_load`` of the cluster on top, so the
guaranteed jobs keep taking GPUs back. A ``checkpointing`` fraction of the opportunistic jobs saves its
work on its preemption notice's signal (the ``--signal=B:USR1@120`` + ``trap`` pattern).
"""

from __future__ import annotations

import numpy as np

from hivebatch.sim.workload import USER_GPU_WEIGHTS, USER_GPUS, SimJob

HOUR = 3600.0


def _stream(
    rng: np.random.Generator, rate_per_h: float, hours: float, mean_h: float, max_gpus: int
) -> list[tuple[float, int, float]]:
    """(arrival, GPUs, duration) of a Poisson stream; durations exponential, 10 min to 24 h."""
    out: list[tuple[float, int, float]] = []
    t = 0.0
    sizes = [g for g in USER_GPUS if g <= max_gpus]
    weights = np.array(USER_GPU_WEIGHTS[: len(sizes)])
    while True:
        t += float(rng.exponential(HOUR / rate_per_h))
        if t >= hours * HOUR:
            return out
        gpus = int(rng.choice(sizes, p=weights / weights.sum()))
        duration = float(np.clip(rng.exponential(mean_h * HOUR), 600.0, 24 * HOUR))
        out.append((t, gpus, duration))


def preempting_workload(
    vc_gpus: dict[str, int],
    hours: float = 168.0,
    seed: int = 1,
    guaranteed_load: float = 0.5,
    opportunistic_load: float = 0.8,
    checkpointing: float = 0.5,
) -> list[SimJob]:
    rng = np.random.default_rng(seed)
    mean_gpus = float(np.dot(USER_GPUS, USER_GPU_WEIGHTS))
    jobs: list[SimJob] = []
    for vc, size in sorted(vc_gpus.items()):
        rate = guaranteed_load * size / (mean_gpus * 2.0)
        for t, g, d in _stream(rng, rate, hours, 2.0, size):
            jobs.append(SimJob(f"{vc}-g{len(jobs)}", vc, "normal", t, g, duration_s=d))
    total = sum(vc_gpus.values())
    vcs = sorted(vc_gpus)
    for t, g, d in _stream(rng, opportunistic_load * total / (mean_gpus * 4.0), hours, 4.0, 8):
        vc = vcs[int(rng.integers(len(vcs)))]
        saves = bool(rng.random() < checkpointing)
        jobs.append(
            SimJob(
                f"{vc}-o{len(jobs)}", vc, "normal", t, g, duration_s=d, opportunistic=True, checkpoints=saves
            )
        )
    jobs.sort(key=lambda j: j.arrival)
    return jobs
