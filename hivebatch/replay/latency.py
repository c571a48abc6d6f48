"""Where a job's wait under hivebatch went, per VC: from Slurm's submit to the controller's first placement
(waiting for a cycle, for cells or for the policy), and from that placement to Slurm's start (Slurm's own
scheduling). Real seconds, from the replay's ledger; what the sacct figures cannot separate."""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class JobTimes:
    vc: str
    submitted: dt.datetime
    placed: dt.datetime | None  # the controller's first placement
    started: dt.datetime | None  # Slurm's first start
    reasons: tuple[str, ...] = ()  # why the controller kept it waiting, in the order it said so


def _split(s: list[float]) -> str:
    return f"mean {statistics.fmean(s):.1f}, max {max(s):.1f}" if s else "-"


def latency_lines(
    jobs: list[JobTimes], cycles_s: list[float], starts: list[float] | None = None
) -> list[str]:
    """``cycles_s``: each controller cycle's duration; ``starts``: when each began (monotonic seconds),
    whose mean spacing is the period the simulator's prediction assumed."""
    lines = []
    if cycles_s:
        every = ""
        if starts and len(starts) > 1:
            every = f"one every {(starts[-1] - starts[0]) / (len(starts) - 1):.3f} s, "
        lines.append(
            f"controller: {len(cycles_s)} cycles, {every}median {statistics.median(cycles_s):.2f} s, "
            f"longest {max(cycles_s):.2f} s"
        )
    for vc in sorted({j.vc for j in jobs}):
        mine = [j for j in jobs if j.vc == vc]
        to_placed = [(j.placed - j.submitted).total_seconds() for j in mine if j.placed]
        to_start = [(j.started - j.placed).total_seconds() for j in mine if j.placed and j.started]
        lines.append(
            f"{vc}: submit -> placed {_split(to_placed)} s; placed -> started {_split(to_start)} s "
            f"(real seconds, {len(mine)} jobs)"
        )
        waited = [(j.placed - j.submitted, j) for j in mine if j.placed and j.reasons]
        if waited:
            _, worst = max(waited, key=lambda w: w[0])
            lines.append(f"{vc}: the longest wait was told: " + " | ".join(r[:120] for r in worst.reasons))
    return lines
