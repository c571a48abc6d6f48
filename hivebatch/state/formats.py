"""How placements, times and slack are written, the same in hq, hsub --test-only and hq vc."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping


def format_placement(placement: Mapping[str, Iterable[int]] | None) -> str:
    """``node2:[3,5]``; several nodes joined by spaces."""
    if not placement:
        return ""
    return " ".join(
        f"{node}:[{','.join(str(i) for i in sorted(gpus))}]" for node, gpus in sorted(placement.items())
    )


def _local(t: dt.datetime | None) -> dt.datetime | None:
    """Naive UTC → local time for display."""
    if t is None:
        return None
    return t.replace(tzinfo=dt.UTC).astimezone()


def format_time(t: dt.datetime | None, now: dt.datetime) -> str:
    """``16:42`` today, ``11-22 09:00`` on another day this year, ``2027-11-28 18:29`` in another year,
    ``-`` when unknown (times are naive UTC)."""
    lt, ln = _local(t), _local(now)
    if lt is None or ln is None:
        return "-"
    if lt.date() == ln.date():
        return lt.strftime("%H:%M")
    if lt.year != ln.year:
        # Slurm expects a job blocked by jobs without a time limit to start a year on: without the year
        # that read as today (seen in hq: START 11-28 18:29 on 11-28)
        return lt.strftime("%Y-%m-%d %H:%M")
    return lt.strftime("%m-%d %H:%M")


def format_slack(seconds: float | None) -> str:
    """``+12m`` of slack before the class's ECT, ``-5m`` when predicted late."""
    if seconds is None:
        return "-"
    s = abs(int(seconds))
    sign = "-" if seconds < 0 and s > 0 else "+"  # late by a fraction of a second is on time: not "-0s"
    if s < 60:
        return f"{sign}{s}s"
    minutes = s // 60
    if minutes < 60:
        return f"{sign}{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h{minutes:02d}m"
    return f"{sign}{hours // 24}d"
