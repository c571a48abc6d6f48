"""GPUs in use over time, per VC, for the utilisation plot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hivebatch.reports.rows import RunSegment

OPPORTUNISTIC_SERIES = "opportunistic"


@dataclass
class UsageSeries:
    starts: list[datetime]  # start of each bin
    until: datetime
    bin_s: float
    series: dict[str, list[float]]  # VC (or "opportunistic") -> mean GPUs in use during each bin


def usage_series(segments: list[RunSegment], since: datetime, until: datetime, bins: int = 96) -> UsageSeries:
    """Mean GPUs in use per bin; guaranteed work per VC, opportunistic work of every VC in one series."""
    span = max(1.0, (until - since).total_seconds())
    bins = max(1, bins)
    width = span / bins
    starts = [since + timedelta(seconds=i * width) for i in range(bins)]
    series: dict[str, list[float]] = {}
    for seg in segments:
        key = OPPORTUNISTIC_SERIES if seg.opportunistic else seg.vc
        values = series.setdefault(key, [0.0] * bins)
        a = max(0.0, (seg.start - since).total_seconds())
        b = min(span, ((seg.end or until) - since).total_seconds())
        if b <= a:
            continue
        first, last = int(a // width), min(bins - 1, int(b // width))
        for i in range(first, last + 1):
            lo, hi = max(a, i * width), min(b, (i + 1) * width)
            if hi > lo:
                values[i] += seg.gpus * (hi - lo) / width
    ordered = {k: series[k] for k in sorted(series) if k != OPPORTUNISTIC_SERIES}
    if OPPORTUNISTIC_SERIES in series:
        ordered[OPPORTUNISTIC_SERIES] = series[OPPORTUNISTIC_SERIES]
    return UsageSeries(starts=starts, until=until, bin_s=width, series=ordered)
