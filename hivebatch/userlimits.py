"""Per-user limits on the strict classes (``user_limits:`` in the config), and the decisions they make.

urgent and prior jobs outrank, and may preempt, a colleague's work in the same VC, so each user gets a
budget per VC: GPU-hours over the last 7 days (a rolling window: no day of the week on which every
budget refills at once) and jobs holding GPUs at the same time. normal and opportunistic jobs are
never limited here; they are where a user over a limit goes.

The limits are checked three times, against the same figures:
- at submit, by the job_submit plugin (every client), against the usage file the controller writes
  each cycle (``hivebatch.controller.usage``), through :func:`site_limits`;
- at placement, by the controller against its ledger (:func:`class_within`): a job accepted while its
  owner was under a limit runs as the next class down once the owner is over it;
- in ``hadmin report users``, which shows each user's use against the limits.

This module takes plain data and returns decisions; the config mapping comes from hivebatch.config.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hivebatch.errors import ConfigError

#: the classes a limit may be set on, strictest first; each falls back to the next one down
STRICT_CLASSES = ("urgent", "prior")
FALLBACK = {"urgent": "prior", "prior": "normal"}
WINDOW = timedelta(days=7)
#: states of a job that holds (or is about to hold) GPUs
HOLDING_STATES = frozenset({"placed", "running"})
_KEYS = ("gpu_hours_per_week", "running_jobs")
EXAMPLE = "{urgent: {gpu_hours_per_week: 48, running_jobs: 2}}"


@dataclass(frozen=True)
class ClassLimit:
    """A user's budget in one class and VC; None is no limit."""

    gpu_hours_per_week: float | None = None
    running_jobs: int | None = None


@dataclass(frozen=True)
class UserLimits:
    classes: dict[str, ClassLimit] = field(default_factory=dict)
    #: a VC's own figures, key by key over ``classes`` (a null there lifts the limit in that VC)
    vcs: dict[str, dict[str, dict[str, float | int | None]]] = field(default_factory=dict)

    def limit(self, vc: str, cls: str) -> ClassLimit | None:
        """The limit on ``cls`` jobs in ``vc``, or None when that class is not limited there."""
        base = self.classes.get(cls)
        over = self.vcs.get(vc, {}).get(cls)
        if over is None:
            return base
        merged: dict[str, float | int | None] = {k: getattr(base, k) if base else None for k in _KEYS}
        merged.update(over)
        found = _limit_of(merged)
        return None if found == ClassLimit() else found

    @property
    def empty(self) -> bool:
        return not self.classes and not self.vcs


def _limit_of(figures: Mapping[str, float | int | None]) -> ClassLimit:
    hours, jobs = figures.get("gpu_hours_per_week"), figures.get("running_jobs")
    return ClassLimit(None if hours is None else float(hours), None if jobs is None else int(jobs))


@dataclass
class StrictUse:
    """One user's use of one class in one VC: GPU-hours in the window, jobs holding GPUs now."""

    gpu_hours: float = 0.0
    running: int = 0


#: (user, VC, class) → its use
UsageKey = tuple[str, str, str]


def _line(section: Any, key: str) -> str:
    line = getattr(section, "lines", {}).get(key)
    return f"line {line}: " if line else ""


def _class_limit(raw: Any, where: str, at: str, partial: bool) -> dict[str, float | int | None]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{at}{where}: must be a mapping like {{gpu_hours_per_week: 48, running_jobs: 2}}")
    out: dict[str, float | int | None] = {}
    for key, value in raw.items():
        at_key = _line(raw, key) or at
        if key not in _KEYS:
            raise ConfigError(f"{at_key}{where}: unknown key {key!r} (known: {', '.join(_KEYS)})")
        if value is None and partial:
            out[key] = None  # a VC lifts the limit
            continue
        whole = key == "running_jobs"
        ok = not isinstance(value, bool) and isinstance(value, int if whole else (int, float))
        if not ok or value < 0 or value != value:
            kind = "a whole number" if whole else "a number of GPU-hours"
            raise ConfigError(f"{at_key}{where}.{key}: must be {kind} >= 0, got {value!r}")
        out[key] = int(value) if whole else float(value)
    return out


def _classes(
    raw: Any, where: str, at: str, partial: bool, skip: tuple[str, ...] = ()
) -> dict[str, dict[str, float | int | None]]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{at}{where}: must be a mapping like {EXAMPLE}")
    out: dict[str, dict[str, float | int | None]] = {}
    for cls, value in raw.items():
        if cls in skip:
            continue
        at_cls = _line(raw, cls) or at
        if cls not in STRICT_CLASSES:
            raise ConfigError(
                f"{at_cls}{where}: {cls!r} cannot be limited (limits apply to {', '.join(STRICT_CLASSES)}"
                f"{'' if partial else ', and vcs: holds per-VC figures'}; normal and opportunistic are "
                "where a user over a limit goes)"
            )
        out[str(cls)] = _class_limit(value, f"{where}.{cls}", at_cls, partial)
    return out


def parse_user_limits(data: Mapping[str, Any], vcs: Iterable[str] | None = None) -> UserLimits:
    """The config's ``user_limits:`` section; ``vcs`` (the configured VCs) checks the overrides' names."""
    section = data.get("user_limits")
    if section is None:
        return UserLimits()
    at = _line(data, "user_limits")
    if not isinstance(section, Mapping):
        raise ConfigError(f"{at}user_limits: must be a mapping like {EXAMPLE}")
    parsed = _classes(section, "user_limits", at, partial=False, skip=("vcs",))
    classes = {c: _limit_of(v) for c, v in parsed.items()}
    overrides: dict[str, dict[str, dict[str, float | int | None]]] = {}
    raw_vcs = section.get("vcs") or {}
    at_vcs = _line(section, "vcs") or at
    if not isinstance(raw_vcs, Mapping):
        raise ConfigError(f"{at_vcs}user_limits.vcs: must map a VC to its limits, e.g. {{nlp: {EXAMPLE}}}")
    known = set(vcs) if vcs is not None else None
    for vc, raw in raw_vcs.items():
        at_vc = _line(raw_vcs, vc) or at_vcs
        if known is not None and vc not in known:
            raise ConfigError(
                f"{at_vc}user_limits.vcs: {vc!r} is not a virtual cluster (VCs: {', '.join(sorted(known))})"
            )
        overrides[str(vc)] = _classes(raw, f"user_limits.vcs.{vc}", at_vc, partial=True)
    return UserLimits(classes=classes, vcs=overrides)


def _hours(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def over_limit(limit: ClassLimit, use: StrictUse, user: str, cls: str) -> str | None:
    """What ``user`` is over (plain words), or None while one more job of the class is within the limit."""
    if limit.gpu_hours_per_week is not None and use.gpu_hours >= limit.gpu_hours_per_week:
        return f"{user} used {_hours(use.gpu_hours)} of {_hours(limit.gpu_hours_per_week)} GPU-hours in the last 7 days"
    if limit.running_jobs is not None and use.running >= limit.running_jobs:
        return f"{user} has {use.running} of {limit.running_jobs} {cls} jobs holding GPUs"
    return None


def class_within(
    limits: UserLimits, usage: Mapping[UsageKey, StrictUse], user: str, vc: str, cls: str
) -> tuple[str, str | None]:
    """The strictest class at or below ``cls`` that ``user`` is within in ``vc``, and why it is lower."""
    why: str | None = None
    while cls in FALLBACK:
        limit = limits.limit(vc, cls)
        over = over_limit(limit, usage.get((user, vc, cls), StrictUse()), user, cls) if limit else None
        if over is None:
            return cls, why
        why = why or f"{cls} limit in {vc}: {over}"
        cls = FALLBACK[cls]
    return cls, why


@dataclass(frozen=True)
class StrictRun:
    """A stretch of GPU time of one job, as plain data (reports' run segments fit)."""

    user: str
    vc: str
    cls: str
    gpus: float
    start: datetime
    end: datetime | None  # None: still running


def aware_utc(t: datetime) -> datetime:
    """The ledger keeps naive UTC; runs read from it are aware."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def strict_usage(
    runs: Iterable[StrictRun], holding: Iterable[tuple[str, str, str]], now: datetime
) -> dict[UsageKey, StrictUse]:
    """Use per (user, VC, class) of the strict classes: GPU-hours of ``runs`` inside the 7 days up to
    ``now``, and one job for each (user, VC, class) in ``holding`` (the jobs placed or running)."""
    now = aware_utc(now)
    since = now - WINDOW
    out: dict[UsageKey, StrictUse] = {}
    for run in runs:
        if run.cls not in STRICT_CLASSES:
            continue
        start, end = max(run.start, since), min(run.end or now, now)
        if end > start:
            use = out.setdefault((run.user, run.vc, run.cls), StrictUse())
            use.gpu_hours += run.gpus * (end - start).total_seconds() / 3600.0
    return with_holding(out, holding)


def with_holding(
    usage: Mapping[UsageKey, StrictUse], holding: Iterable[tuple[str, str, str]]
) -> dict[UsageKey, StrictUse]:
    """``usage``'s GPU-hours with the jobs holding GPUs counted afresh from ``holding`` (user, VC, class)."""
    out = {key: StrictUse(use.gpu_hours, 0) for key, use in usage.items()}
    for key in holding:
        if key[2] in STRICT_CLASSES:
            out.setdefault(key, StrictUse()).running += 1
    return out


def site_limits(limits: UserLimits, vcs: Iterable[str]) -> dict[str, dict[str, dict[str, float | int]]]:
    """The limits per VC and class as the job_submit plugin reads them (HIVEBATCH_SITE.user_limits)."""
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for vc in vcs:
        for cls in STRICT_CLASSES:
            limit = limits.limit(vc, cls)
            if limit is not None:
                figures = {k: getattr(limit, k) for k in _KEYS if getattr(limit, k) is not None}
                out.setdefault(vc, {})[cls] = figures
    return out


@dataclass(frozen=True)
class StrictLine:
    """One user's use of one strict class in one VC, beside its limit (for ``hadmin report users``)."""

    user: str
    vc: str
    cls: str
    use: StrictUse
    limit: ClassLimit | None

    @property
    def over(self) -> str | None:
        return over_limit(self.limit, self.use, self.user, self.cls) if self.limit else None


def strict_lines(limits: UserLimits, usage: Mapping[UsageKey, StrictUse]) -> list[StrictLine]:
    """Every (user, VC, strict class) with some use, by user, VC, then strictest class first."""
    order = {c: i for i, c in enumerate(STRICT_CLASSES)}
    keys = sorted(usage, key=lambda k: (k[0], k[1], order.get(k[2], len(order))))
    return [StrictLine(u, vc, c, usage[(u, vc, c)], limits.limit(vc, c)) for u, vc, c in keys]
