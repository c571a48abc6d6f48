"""Per-user fairshare inside a VC: recent GPU-hours, decaying, order jobs of one VC and class.

Usage decays exponentially with a half-life: a GPU-hour used one half-life ago counts ½, two ago ¼.
A run of ``gpus`` GPUs over [start, end] therefore counts the integral of gpus·2^-(now-t)/h dt,
which is exact for any run length and needs no per-cycle bookkeeping: the controller recomputes it
from the jobs ledger, the simulator from its finished and running jobs.

The order only moves jobs inside the slots their (VC, class) group already holds in the policy's
order: the policy still decides which VC and which class goes first, and fairshare only decides
which user's job of that group takes each of the group's turns (lowest recent usage first; equal
usage keeps the policy's order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0

T = TypeVar("T")


@dataclass(frozen=True)
class Run:
    """GPUs one user held from ``start`` to ``end`` (epoch seconds)."""

    user: str
    gpus: float
    start: float
    end: float


def decay(age_s: float, half_life_s: float) -> float:
    """Weight of usage ``age_s`` seconds old: 1 now, ½ one half-life ago."""
    return math.pow(0.5, max(0.0, age_s) / half_life_s)


def decayed_gpu_hours(run: Run, now: float, half_life_s: float) -> float:
    """∫ gpus · 2^-(now-t)/h dt over the part of the run before ``now``, in GPU-hours."""
    end = min(run.end, now)
    if end <= run.start or run.gpus <= 0:
        return 0.0
    scale = half_life_s / math.log(2)
    seconds = scale * (decay(now - end, half_life_s) - decay(now - run.start, half_life_s))
    return run.gpus * seconds / 3600.0


def usage_by_user(runs: Iterable[Run], now: float, half_life_s: float) -> dict[str, float]:
    """Each user's decayed GPU-hours over ``runs``."""
    out: dict[str, float] = {}
    for r in runs:
        out[r.user] = out.get(r.user, 0.0) + decayed_gpu_hours(r, now, half_life_s)
    return out


class DecayedUsage:
    """Running per-user totals for a clock that only moves forward (the simulator).

    A user's total is kept as its value at the time of its last addition, so reading it later costs
    one decay factor instead of a walk over every past run.
    """

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self._value: dict[str, tuple[float, float]] = {}  # user -> (decayed GPU-hours, as of time)

    def add(self, run: Run) -> None:
        """Count a finished (or cut short) run."""
        value, at = self._value.get(run.user, (0.0, run.end))
        t = max(at, run.end)
        value = value * decay(t - at, self.half_life_s) + decayed_gpu_hours(run, t, self.half_life_s)
        self._value[run.user] = (value, t)

    def at(self, now: float, running: Iterable[Run] = ()) -> dict[str, float]:
        """Each user's decayed GPU-hours at ``now``, with the runs still going counted up to now."""
        out = {u: v * decay(now - t, self.half_life_s) for u, (v, t) in self._value.items()}
        for r in running:
            out[r.user] = out.get(r.user, 0.0) + decayed_gpu_hours(r, now, self.half_life_s)
        return out


def _slots(items: Sequence[T], group: Callable[[T], Hashable | None]) -> dict[Hashable, list[int]]:
    """Each group's positions in ``items`` (items whose group is None belong to none)."""
    slots: dict[Hashable, list[int]] = {}
    for i, it in enumerate(items):
        g = group(it)
        if g is not None:
            slots.setdefault(g, []).append(i)
    return slots


def reorder(
    items: Sequence[T],
    group: Callable[[T], Hashable | None],
    user: Callable[[T], str | None],
    usage: Mapping[str, float],
) -> list[T]:
    """``items`` with each group's members re-sorted by their user's usage, in the group's own slots.

    Items whose group is None keep their place; a user with no recorded usage counts 0.
    """
    slots = _slots(items, group)
    out = list(items)
    for idx in slots.values():
        members = sorted((items[i] for i in idx), key=lambda it: usage.get(user(it) or "", 0.0))
        for i, it in zip(idx, members, strict=True):
            out[i] = it
    return out


def by_nice(
    items: Sequence[T],
    group: Callable[[T], Hashable | None],
    user: Callable[[T], str | None],
    nice: Callable[[T], int],
) -> list[T]:
    """``items`` with each group's members in the group's own slots: each user's by their nice, lowest
    first, then those with a positive nice after all others, as Slurm lowers a job's priority by it
    (`--nice`, `scontrol update Nice=`). Otherwise the order stays; items whose group is None keep
    their place."""
    slots = _slots(items, group)
    out = list(items)
    for idx in slots.values():
        members = [items[i] for i in idx]
        by_user: dict[str, list[int]] = {}
        for k, it in enumerate(members):
            by_user.setdefault(user(it) or "", []).append(k)
        ranked = list(members)
        for pos in by_user.values():
            for k, it in zip(pos, sorted((members[k] for k in pos), key=nice), strict=True):
                ranked[k] = it
        ranked.sort(key=lambda it: nice(it) > 0)
        for i, it in zip(idx, ranked, strict=True):
            out[i] = it
    return out
