"""The prediction over where the controller's cycles fall.

A live controller's cycles fall wherever its timer puts them relative to the submissions, and that
moves the waits: a `normal` job decided one cycle later can pass the point where it still meets its
expected completion and go behind a whole wave of newer jobs (docs/simulate.md). One prediction is
one such phase; the same slice predicted at evenly spread phases (``compare.phase_spread``) gives the
range a live run may fall in, and its mean is the figure to expect when the phase is not known.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spread:
    waits_s: list[float]  # the predicted mean wait at each phase, phase 0 first

    @property
    def mean_s(self) -> float:
        return statistics.mean(self.waits_s)

    def inside(self, measured_s: float) -> bool:
        return min(self.waits_s) <= measured_s <= max(self.waits_s)

    def to_json(self, measured_s: float | None = None) -> dict[str, Any]:
        return {
            "phases": len(self.waits_s),
            "mean_s": self.mean_s,
            "min_s": min(self.waits_s),
            "max_s": max(self.waits_s),
            "waits_s": self.waits_s,
            "slurm_inside": None if measured_s is None else self.inside(measured_s),
        }
