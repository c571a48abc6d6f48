"""Before/after figures of the two rules that order work inside a VC, on the simulator.

* ``starvation``: the mixed 1/2/8-GPU stream with backfill reservations off and on — the worst and
  mean wait of the 8-GPU jobs, the mean wait of all jobs, the QoS rate and the utilisation.
* ``fairness``: the heavy and the light user with fairshare off and on — each user's mean wait.

Wait is the time from arrival to the first start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from hivebatch.qos import QosSettings
from hivebatch.reservation import DEFAULT_STARVE_AFTER_S
from hivebatch.sim import vc_workloads as wl
from hivebatch.sim.engine import JobRecord, Simulation
from hivebatch.sim.metrics import summarize
from hivebatch.sim.setup import build_platform, build_runtime, build_spec
from hivebatch.sim.workload import SimJob

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0


@dataclass
class Figures:
    workload: str
    rule: str  # "off" or "on"
    jobs: int
    mean_wait_s: float
    qos_rate: float
    utilization: float
    big_jobs: int = 0
    big_worst_wait_s: float = 0.0
    big_mean_wait_s: float = 0.0
    light_mean_wait_s: float = 0.0
    heavy_mean_wait_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _wait(r: JobRecord) -> float:
    assert r.first_start is not None
    return r.first_start - r.job.arrival


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _run(jobs: list[SimJob], nodes: int, policy: str, **kw: Any) -> tuple[list[JobRecord], Any]:
    spec = build_spec(wl.one_vc_config(nodes))
    qos = QosSettings()
    platform = build_platform(spec, qos)
    run = Simulation(spec, jobs, policy, "cells", build_runtime(spec, platform, qos), platform, **kw).run()
    return [r for r in run.records if r.first_start is not None], summarize(run)


def _compare(
    workload: str,
    jobs: list[SimJob],
    nodes: int,
    policy: str,
    rules: list[tuple[str, dict[str, Any]]],
    extra: Callable[[list[JobRecord]], dict[str, Any]],
) -> list[Figures]:
    """One run of ``jobs`` per (rule, simulation settings), with the workload's own ``extra`` figures."""
    out = []
    for rule, kw in rules:
        started, s = _run(jobs, nodes, policy, **kw)
        mean = _mean([_wait(r) for r in started])
        out.append(Figures(workload, rule, len(jobs), mean, s.qos_rate, s.utilization, **extra(started)))
    return out


def _large_jobs(started: list[JobRecord]) -> dict[str, Any]:
    big = [_wait(r) for r in started if r.job.gpus == 8]
    return {"big_jobs": len(big), "big_worst_wait_s": max(big, default=0.0), "big_mean_wait_s": _mean(big)}


def _users(started: list[JobRecord]) -> dict[str, Any]:
    by_user: dict[str, list[float]] = {}
    for r in started:
        by_user.setdefault(r.job.user or "", []).append(_wait(r))
    return {
        "light_mean_wait_s": _mean(by_user.get("light", [])),
        "heavy_mean_wait_s": _mean(by_user.get("heavy", [])),
    }


def starvation(
    seed: int = 1, hours: float = 48.0, policy: str = "qos", starve_after_s: float = DEFAULT_STARVE_AFTER_S
) -> list[Figures]:
    """The mixed stream on one VC of 4 8-GPU nodes, reservations off then on."""
    on = {"backfill": True, "starve_after_s": starve_after_s}
    rules = [("off", {"backfill": False}), ("on", on)]
    return _compare("starvation", wl.mixed_stream(seed, hours, 4 * 8), 4, policy, rules, _large_jobs)


def fairness(
    seed: int = 1, hours: float = 48.0, policy: str = "qos", half_life_s: float = DEFAULT_HALF_LIFE_S
) -> list[Figures]:
    """The heavy and the light user on one VC of 2 8-GPU nodes, fairshare off then on."""
    rules = [("off", {}), ("on", {"fairshare_half_life_s": half_life_s})]
    return _compare("fairness", wl.two_users(seed, hours, 2 * 8), 2, policy, rules, _users)


_COMMON = ("workload", "rule", "jobs", "mean wait min", "QoS rate", "util")
_COLUMNS = {
    "starvation": ("8-GPU jobs", "8-GPU worst wait min", "8-GPU mean wait min"),
    "fairness": ("light user mean wait min", "heavy user mean wait min"),
}


def _cells(f: Figures) -> list[str]:
    common = [
        f.workload,
        f.rule,
        str(f.jobs),
        f"{f.mean_wait_s / 60:.1f}",
        f"{f.qos_rate:.3f}",
        f"{f.utilization:.3f}",
    ]
    if f.workload == "starvation":
        return [*common, str(f.big_jobs), f"{f.big_worst_wait_s / 60:.1f}", f"{f.big_mean_wait_s / 60:.1f}"]
    return [*common, f"{f.light_mean_wait_s / 60:.1f}", f"{f.heavy_mean_wait_s / 60:.1f}"]


def format_table(figures: list[Figures]) -> str:
    """One tab-separated line per run of one workload, waits in minutes."""
    head = [*_COMMON, *_COLUMNS[figures[0].workload]] if figures else list(_COMMON)
    return "\n".join("\t".join(row) for row in [head, *(_cells(f) for f in figures)])
