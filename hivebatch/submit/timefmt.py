"""Slurm's time-limit formats (``-t/--time``), parsed the way sbatch parses them."""

from __future__ import annotations

import re

from hivebatch.errors import HivebatchError

_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$")
_CLOCK = re.compile(r"^(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time_limit(text: str) -> int | None:
    """Seconds for a Slurm time limit; None for UNLIMITED/infinite. Raises HivebatchError on bad input."""
    value = text.strip()
    if value.lower() in ("unlimited", "infinite", "-1"):
        return None
    m = _DAYS.match(value)
    if m:
        days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
        total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    else:
        m = _CLOCK.match(value)
        if not m:
            raise HivebatchError(f"time limit {text!r} is not a Slurm time: use {_FORMATS}")
        parts = [int(g) for g in m.groups() if g is not None]
        if len(parts) == 1:  # minutes
            total = parts[0] * 60
        elif len(parts) == 2:  # minutes:seconds
            total = parts[0] * 60 + parts[1]
        else:  # hours:minutes:seconds
            total = (parts[0] * 60 + parts[1]) * 60 + parts[2]
    if total <= 0:
        raise HivebatchError(f"time limit {text!r} must be longer than zero")
    return total


def parse_time_option(text: str) -> int | None:
    """Seconds of a ``-t/--time`` value as sbatch sets the job's limit: in whole minutes (seconds round
    up), and zero is no limit like UNLIMITED (slurm_opt.c arg_set_time_limit; recorded:
    tests/fixtures/sbatch/time_limits.txt). Raises HivebatchError on bad input."""
    value = text.strip()
    if value.lower() in ("unlimited", "infinite", "-1"):
        return None
    if not value.strip("0:-") and (_DAYS.match(value) or _CLOCK.match(value)):
        return None
    return -(-parse_time_limit(text) // 60) * 60


def format_duration(seconds: float | None) -> str:
    """Seconds as Slurm prints them: [D-]HH:MM:SS."""
    if seconds is None:
        return "UNLIMITED"
    s = max(0, int(round(seconds)))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    clock = f"{hours:02d}:{minutes:02d}:{s:02d}"
    return f"{days}-{clock}" if days else clock
