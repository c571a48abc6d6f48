"""Which slices of a trace are worth replaying on Slurm: a scan of the trace with the simulator.

A live replay costs real minutes, so before one the admin wants a window that fits the time at
hand, that hivebatch can run whole (every job fits its VC's cells), and that shows something: a
VC that plain Slurm makes wait longer than its private cluster would. Each window is planned as
the replay would plan it and predicted in both modes (``compare.predict``), about a second each.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hivebatch.replay.compare import predict
from hivebatch.replay.plan import SliceSpec, plan_replay
from hivebatch.sim.metrics import RunSummary
from hivebatch.sim.workload import SimJob


@dataclass(frozen=True)
class Candidate:
    """One window that fits the budget and runs whole in both modes; waits in trace minutes."""

    start_h: float
    jobs: int
    wall_s: float  # real seconds of the longer of the two replays, as the simulator predicts it
    plain_excess: dict[str, float]  # VC -> excess wait over its private cluster
    hivebatch_excess: dict[str, float]
    plain_wait: float  # mean wait of the slice's jobs
    hivebatch_wait: float

    @property
    def anomaly(self) -> float:
        """How much longer plain Slurm makes its worst VC wait than hivebatch does its worst."""
        return max(self.plain_excess.values(), default=0.0) - max(self.hivebatch_excess.values(), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "start_h": self.start_h,
            "jobs": self.jobs,
            "wall_s": round(self.wall_s, 1),
            "plain_excess_min": {vc: round(x, 2) for vc, x in self.plain_excess.items()},
            "hivebatch_excess_min": {vc: round(x, 2) for vc, x in self.hivebatch_excess.items()},
            "plain_wait_min": round(self.plain_wait, 2),
            "hivebatch_wait_min": round(self.hivebatch_wait, 2),
        }


@dataclass(frozen=True)
class Scan:
    """The windows to try: ``spec`` (its start and length) moved on by ``step_s`` until ``until_s``."""

    spec: SliceSpec
    step_s: float
    until_s: float
    budget_s: float  # real seconds each replay (plain, hivebatch) may take, waits included


def _excess_min(summary: RunSummary) -> dict[str, float]:
    return {vc: v.get("excess_queue_s", 0.0) / 60 for vc, v in summary.vcs.items()}


def find_slices(
    jobs: list[SimJob],
    scan: Scan,
    data: dict[str, Any],
    config_dir: Path | None,
    vc_gpus: dict[str, int],
    shape_limits: tuple[int, int],
    policies: tuple[str, str],
    timing: tuple[float, float, float],
) -> Iterator[Candidate]:
    """Each window of the scan that fits the budget and that both modes run whole, in trace order.

    ``shape_limits``: GPUs per node and nodes of the cluster; ``policies``: the plain and the
    hivebatch policy; ``timing``: the controller's cycle, Slurm's requeue delay and its start latency,
    trace seconds.
    """
    if scan.step_s <= 0:
        raise ValueError("the scan's step must be > 0")
    start = scan.spec.start_s
    while start < scan.until_s:
        spec = replace(scan.spec, start_s=start)
        plan = plan_replay(jobs, spec, vc_gpus, *shape_limits)
        # the arrivals and runs alone bound the replay's time from below: no need to simulate past it
        if plan.jobs and plan.wall_s <= scan.budget_s:
            plain = predict(plan, data, config_dir, "plain", policies[0]).summary
            hive = predict(plan, data, config_dir, "hivebatch", policies[1], *timing).summary
            # with the waits: each mode's predicted makespan, in real seconds
            wall = max(plain.makespan_s, hive.makespan_s) / spec.speedup
            if plain.completed == plain.jobs and hive.completed == hive.jobs and wall <= scan.budget_s:
                yield Candidate(
                    start / 3600,
                    len(plan.jobs),
                    wall,
                    _excess_min(plain),
                    _excess_min(hive),
                    plain.avg_queue_s / 60,
                    hive.avg_queue_s / 60,
                )
        start += scan.step_s


def format_candidates(found: list[Candidate], interval_min: float) -> str:
    """Tab-separated rows, the strongest anomaly first; a row's VCs as ``vc+x.x``."""

    def vcs(excess: dict[str, float]) -> str:
        return " ".join(f"{vc}{x:+.1f}" for vc, x in sorted(excess.items()))

    lines = [
        f"# excess wait over each VC's private cluster, trace min, simulated (one controller interval = {interval_min:.2f})",
        "start h\tjobs\treplay s\tplain excess\thivebatch excess\tmean wait plain/hivebatch",
    ]
    for c in sorted(found, key=lambda c: (-c.anomaly, c.start_h)):
        lines.append(
            f"{c.start_h:g}\t{c.jobs}\t{c.wall_s:.0f}\t{vcs(c.plain_excess)}\t{vcs(c.hivebatch_excess)}\t"
            f"{c.plain_wait:.1f}/{c.hivebatch_wait:.1f}"
        )
    return "\n".join(lines)
