"""Measured corrections on top of the physical form, for what the profiled grid shows and the form cannot.

The default form is smooth and physical, so it cannot follow what a profile measures at one shape or
one batch size alone: a placement slower than the form at every batch (bert on RTX: 2x2 by about
15%), a batch size slower on every shape (imagenet on RTX: local batch 163, 15-26% slower than its
neighbours). A correction keeps those as factors on the
form's step time, learned as medians of measured/predicted over the profile's rows:

* one factor per profiled shape (1 for a shape never measured);
* one factor per profiled local batch. Between two profiled batches it fades to 1 halfway (in log
  batch) and beyond the profiled range it is gone one doubling out, because what one batch size
  measured says little about another.

Both are bounded to [1/BOUND, BOUND], so every corrected step time is positive. Applied to a
placement, the batch correction keeps step time non-decreasing in the local batch (``batch_knots``,
``running_max``) and the shape correction keeps it non-decreasing in nodes and GPUs per node
(``Correction.floor_grid``). Shapes never profiled get the form alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

# A factor beyond this would say the form is wrong, not that a shape or batch deviates from it.
BOUND = 1.35
# Alternating rounds of shape and batch medians; two settle them on every shipped profile.
_ROUNDS = 2
# A factor needs at least this many rows behind it, so one noisy row cannot make one.
_MIN_ROWS = 2


@dataclass(frozen=True)
class Correction:
    """Step-time ratios (measured / form) per profiled shape ``(d_node, d_gpn)`` and per profiled local batch."""

    shapes: dict[tuple[int, int], float]
    batches: tuple[tuple[float, float], ...]  # (local batch, ratio), increasing local batch

    def shape_ratio(self, d_node: np.ndarray, d_gpn: np.ndarray) -> np.ndarray:
        dn = np.asarray(d_node, dtype=int).ravel()
        g = np.asarray(d_gpn, dtype=int).ravel()
        out = np.array([self.shapes.get((int(a), int(b)), 1.0) for a, b in zip(dn, g, strict=True)])
        return out.reshape(np.shape(d_node))

    @cached_property
    def batch_knots(self) -> tuple[np.ndarray, np.ndarray]:
        """(log local batch, log ratio) of the piecewise-linear batch correction.

        Between profiled batches and past the range sit knots of ratio 1, so the correction fades out
        away from what was measured. On each piece log(step time) is the form's log step time (convex
        in log batch: a log-sum of exponentials, or the max of two) minus a linear term, so convex;
        the running maximum over the knots therefore makes corrected step time non-decreasing in the
        local batch (``running_max``)."""
        if not self.batches:
            return np.zeros(0), np.zeros(0)
        lw = np.log([w for w, _ in self.batches])
        lr = np.log([r for _, r in self.batches])
        xs: list[float] = [lw[0] - math.log(2.0)]
        ys: list[float] = [0.0]
        for i, (x, y) in enumerate(zip(lw, lr, strict=True)):
            if i:
                xs.append((lw[i - 1] + x) / 2)
                ys.append(0.0)
            xs.append(float(x))
            ys.append(float(y))
        xs.append(lw[-1] + math.log(2.0))
        ys.append(0.0)
        return np.array(xs), np.array(ys)

    @cached_property
    def floor_grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(d_node, d_gpn, ratio) of every shape in the box the profiled shapes span, 1 where unprofiled.

        A placement's corrected step time is at least that of every shape of this grid it contains,
        which keeps step time non-decreasing in nodes and GPUs per node: a shape measured fast cannot
        make a larger one look faster than a smaller one. A single GPU may measure slower per step
        than two (nothing to overlap data loading with); its factor stands for it alone, and larger
        shapes are held only to its form's time (its factor capped at 1)."""
        if not self.shapes:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        top_n = max(n for n, _ in self.shapes)
        top_g = max(g for _, g in self.shapes)
        grid = [(n, g) for n in range(1, top_n + 1) for g in range(1, top_g + 1)]
        ratios = [self.shapes.get(s, 1.0) if s != (1, 1) else min(self.shapes.get(s, 1.0), 1.0) for s in grid]
        return (
            np.array([n for n, _ in grid], dtype=float),
            np.array([g for _, g in grid], dtype=float),
            np.array(ratios),
        )

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """Per-correction cache of what predictions need for a set of placements (see perfmodel)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "shapes": {f"{n}x{g}": round(r, 5) for (n, g), r in sorted(self.shapes.items())},
            "batches": {f"{w:g}": round(r, 5) for w, r in self.batches},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Correction:
        shapes = {}
        for key, r in dict(d.get("shapes") or {}).items():
            n, g = (int(x) for x in str(key).split("x"))
            shapes[(n, g)] = _bounded(float(r))
        batches = tuple(
            sorted((float(w), _bounded(float(r))) for w, r in dict(d.get("batches") or {}).items())
        )
        if any(w <= 0 for w, _ in batches):
            raise ValueError("correction batches must be positive")
        return cls(shapes, batches)


def _bounded(r: float) -> float:
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"correction ratio must be positive and finite (got {r!r})")
    return min(max(r, 1.0 / BOUND), BOUND)


def learn(shapes: Sequence[tuple[int, int]], batches: Sequence[float], ratios: Sequence[float]) -> Correction:
    """A correction from rows' shape, local batch and measured/predicted step time."""
    r = np.asarray(ratios, dtype=float)
    keys_s = list(shapes)
    keys_b = [float(w) for w in batches]
    by_shape: dict[tuple[int, int], float] = {}
    by_batch: dict[float, float] = {}
    for _ in range(_ROUNDS):
        by_shape = _medians(keys_s, r / np.array([by_batch.get(w, 1.0) for w in keys_b]))
        by_batch = _medians(keys_b, r / np.array([by_shape.get(s, 1.0) for s in keys_s]))
    return Correction(
        {k: _bounded(v) for k, v in by_shape.items()},
        tuple(sorted((w, _bounded(v)) for w, v in by_batch.items())),
    )


def _medians(keys: list[Any], values: np.ndarray) -> dict[Any, float]:
    groups: dict[Any, list[float]] = {}
    for k, v in zip(keys, values, strict=True):
        groups.setdefault(k, []).append(float(v))
    return {k: float(np.median(v)) for k, v in groups.items() if len(v) >= _MIN_ROWS}


def knot_floors(at_knots: np.ndarray, knots_y: np.ndarray) -> np.ndarray:
    """Running maxima over the knots of corrected step times: ``at_knots`` holds the form's times at
    every knot (N placements x K knots); column k of the result is the largest corrected time at
    knots 0..k."""
    return np.maximum.accumulate(at_knots * np.exp(knots_y)[None, :], axis=1)


def running_max(
    step_times: np.ndarray,
    local_batch: np.ndarray,
    knots_x: np.ndarray,
    knots_y: np.ndarray,
    floors: np.ndarray,
) -> np.ndarray:
    """Corrected step times, made non-decreasing in the local batch.

    ``step_times`` are the form's at ``local_batch`` (shape N); ``floors`` the ``knot_floors`` of the
    same placements (N x K). Returns max(T(w)·r(w), max over knots k <= w of T(k)·r(k)).
    """
    if knots_x.size == 0:
        return step_times
    lw = np.log(np.asarray(local_batch, dtype=float))
    here = step_times * np.exp(np.interp(lw, knots_x, knots_y, left=0.0, right=0.0))
    last = np.searchsorted(knots_x, lw, side="right") - 1
    floor = np.where(last >= 0, floors[np.arange(len(lw)), np.maximum(last, 0)], 0.0)
    return np.asarray(np.maximum(here, floor), dtype=float)
