"""Naive-UTC datetimes ↔ epoch seconds, tolerant of the infinities and huge values predictions carry."""

from __future__ import annotations

import datetime as dt
import math


def aware(t: dt.datetime) -> dt.datetime:
    """``t`` with its zone: the controller's clock is naive UTC, Slurm's times are aware."""
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def epoch(t: dt.datetime) -> float:
    return t.replace(tzinfo=dt.UTC).timestamp()


def from_epoch(x: float | None) -> dt.datetime | None:
    if x is None or not math.isfinite(x):
        return None
    try:
        return dt.datetime.fromtimestamp(x, dt.UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def after(t: dt.datetime, seconds: float | None) -> dt.datetime | None:
    """``t`` plus ``seconds``, or None when unknown or past the last date Python represents."""
    if seconds is None or not math.isfinite(seconds):
        return None
    try:
        return t + dt.timedelta(seconds=seconds)
    except OverflowError:
        return None
