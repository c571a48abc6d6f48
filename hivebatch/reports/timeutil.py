"""Dates as an admin types them, durations as an admin reads them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from hivebatch.errors import HivebatchError

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(m|min|h|d|w)$")
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def as_utc(value: datetime | None) -> datetime | None:
    """Naive datetimes from the DB are UTC; make every datetime aware so they compare."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``2026-11-16``, ``2026-11-16T08:00``, or a span back from now: ``90m``, ``12h``, ``7d``, ``2w``."""
    now = now or datetime.now(UTC)
    raw = text.strip()
    match = _RELATIVE.match(raw.lower())
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNIT_S[match.group(2)])
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise HivebatchError(
            f"cannot read date {text!r}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM, or a span like 12h, 7d, 2w"
        ) from None
    result = as_utc(parsed)
    assert result is not None
    return result


def fmt_duration(seconds: float | None) -> str:
    """Compact human duration: 45s, 12m, 3.5h, 2.1d; '-' when unknown."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 60:
        return f"{sign}{s:.0f}s"
    if s < 3600:
        return f"{sign}{s / 60:.0f}m"
    if s < 86400:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / 86400:.1f}d"


def fmt_time(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
