"""Before/after figures of the two rules that order work inside a VC, on the simulator.

* ``starvation``: the mixed 1/2/8-GPU stream with backfill reservations off and on — the worst and
  mean wait of the 8-GPU jobs, the mean wait of all jobs, the QoS rate and the utilisation.
* ``fairness``: the heavy and the light user with fairshare off and on — each user's mean wait.

Wait is the time from arrival to the first start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hivebatch.qos import QosSettings
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


def starvation(seed: int = 1, hours: float = 48.0, nodes: int = 4, policy: str = "qos") -> list[Figures]:
    """The mixed stream on one VC of ``nodes`` 8-GPU nodes, reservations off then on."""
    jobs = wl.mixed_stream(seed, hours, nodes * 8)
    out = []
    for rule, backfill in (("off", False), ("on", True)):
        started, s = _run(jobs, nodes, policy, backfill=backfill)
        big = [_wait(r) for r in started if r.job.gpus == 8]
        out.append(
            Figures(
                "starvation",
                rule,
                len(jobs),
                _mean([_wait(r) for r in started]),
                s.qos_rate,
                s.utilization,
                big_jobs=len(big),
                big_worst_wait_s=max(big, default=0.0),
                big_mean_wait_s=_mean(big),
            )
        )
    return out


def fairness(
    seed: int = 1,
    hours: float = 48.0,
    nodes: int = 2,
    policy: str = "qos",
    half_life_s: float = DEFAULT_HALF_LIFE_S,
) -> list[Figures]:
    """The heavy and the light user on one VC of ``nodes`` 8-GPU nodes, fairshare off then on."""
    jobs = wl.two_users(seed, hours, nodes * 8)
    out = []
    for rule, half_life in (("off", None), ("on", half_life_s)):
        started, s = _run(jobs, nodes, policy, fairshare_half_life_s=half_life)
        by_user: dict[str, list[float]] = {}
        for r in started:
            by_user.setdefault(r.job.user or "", []).append(_wait(r))
        out.append(
            Figures(
                "fairness",
                rule,
                len(jobs),
                _mean([_wait(r) for r in started]),
                s.qos_rate,
                s.utilization,
                light_mean_wait_s=_mean(by_user.get("light", [])),
                heavy_mean_wait_s=_mean(by_user.get("heavy", [])),
            )
        )
    return out


def format_table(figures: list[Figures]) -> str:
    """One line per run, waits in minutes."""
    head = "workload\trule\tjobs\tmean wait min\tQoS rate\tutil\t8-GPU jobs\t8-GPU worst min\t8-GPU mean min\tlight mean min\theavy mean min"
    rows = [head]
    for f in figures:
        rows.append(
            "\t".join(
                [
                    f.workload,
                    f.rule,
                    str(f.jobs),
                    f"{f.mean_wait_s / 60:.1f}",
                    f"{f.qos_rate:.3f}",
                    f"{f.utilization:.3f}",
                    str(f.big_jobs),
                    f"{f.big_worst_wait_s / 60:.1f}",
                    f"{f.big_mean_wait_s / 60:.1f}",
                    f"{f.light_mean_wait_s / 60:.1f}",
                    f"{f.heavy_mean_wait_s / 60:.1f}",
                ]
            )
        )
    return "\n".join(rows)
