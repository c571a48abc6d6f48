"""How a preempted job is told to leave: the notice it gets (config) and the signal (its own --signal).

The length of a notice is the admin's (``preemption.notice_s``, per class in
``preemption.notice_s_by_class``): it decides how long a preempting job waits, so no user sets it. A job
that asked for ``--signal=[B:]SIG@TIME`` gets that signal, on the target Slurm would use (B: the batch
shell alone, else its steps), and at most TIME seconds of notice: it said it needs no more. Without
``--signal`` it gets SIGTERM everywhere (batch shell, its children and its steps), as Slurm's own
preemption grace does, and is requeued (killed) when the notice ends.

Slurm 22.05 shows a job's ``--signal`` to no reader (not squeue, scontrol, or the job_submit plugin's
Lua API), so the plugin records what the job's script directives or ``SBATCH_SIGNAL`` say in the admin
comment (``signal``, ``signal_time_s``, ``signal_batch``); a ``--signal`` given only on sbatch's command
line is unseen and the job gets the default. hsub writes its ``--signal`` into its job script.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hivebatch.errors import ConfigError

DEFAULT_NOTICE_S = 120
#: Slurm's default warning time for --signal=SIG without @TIME
SLURM_DEFAULT_SIGNAL_TIME_S = 60
_NAME = re.compile(r"^[A-Z][A-Z0-9+-]{0,15}$")


@dataclass(frozen=True)
class NoticeSettings:
    """``preemption:`` in the config: seconds of notice, per class where set."""

    notice_s: int = DEFAULT_NOTICE_S
    by_class: Mapping[str, int] = field(default_factory=dict)

    def for_class(self, qos: str | None) -> int:
        return int(self.by_class.get(qos or "", self.notice_s))

    @property
    def slurm_grace_s(self) -> int:
        """The opportunistic QOS's GraceTime as hadmin slurm-config sets it: the notice Slurm gives an
        opportunistic job it preempts for a guaranteed job's CPUs or memory (preempt_grace.txt)."""
        from hivebatch.slurmconf import PREEMPTABLE_QOS

        return self.for_class(PREEMPTABLE_QOS)


def _seconds(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where} must be a whole number of seconds (0 = requeue at once), got {value!r}")
    return value


def parse_notice(data: Mapping[str, Any]) -> NoticeSettings:
    """The config's ``preemption:`` section (absent: 120 s for every class)."""
    from hivebatch.request import CLASSES

    section = data.get("preemption") or {}
    if not isinstance(section, Mapping):
        raise ConfigError(
            "preemption: must be a mapping, e.g. {notice_s: 120, notice_s_by_class: {prior: 300}}"
        )
    notice = _seconds("preemption.notice_s", section.get("notice_s", DEFAULT_NOTICE_S))
    raw = section.get("notice_s_by_class") or {}
    if not isinstance(raw, Mapping):
        raise ConfigError("preemption.notice_s_by_class must map classes to seconds, e.g. {prior: 300}")
    by_class: dict[str, int] = {}
    for cls, value in raw.items():
        if cls not in CLASSES:
            raise ConfigError(f"preemption.notice_s_by_class.{cls}: unknown class (use {', '.join(CLASSES)})")
        by_class[str(cls)] = _seconds(f"preemption.notice_s_by_class.{cls}", value)
    return NoticeSettings(notice, by_class)


@dataclass(frozen=True)
class SignalSpec:
    """The signal a job gets at the start of its notice, and who in the job receives it."""

    signal: str = "TERM"  # a name without SIG
    target: str = "all"  # "batch", "steps" or "all" (hivebatch.slurm.types.SIGNAL_TARGETS)
    time_s: int | None = None  # the warning the job asked for (@TIME); None: it asked for none

    @property
    def text(self) -> str:
        where = {"batch": "its batch shell", "steps": "its job steps", "all": "the whole job"}[self.target]
        return f"SIG{self.signal} to {where}"


DEFAULT_SIGNAL = SignalSpec()


def signal_name(raw: object) -> str | None:
    """USR1, SIGUSR1, usr1 or 10 -> "USR1"; None for anything that is not a signal of this system."""
    text = str(raw).strip().upper()
    if text.isdigit():
        try:
            return _signal.Signals(int(text)).name.removeprefix("SIG")
        except ValueError:
            return None
    text = text.removeprefix("SIG")
    if not _NAME.match(text) or not hasattr(_signal.Signals, "SIG" + text):
        return None
    return text


def signal_of(extras: Mapping[str, Any]) -> SignalSpec:
    """The job's --signal from the plugin's admin comment fields; the default when absent or unreadable."""
    name = signal_name(extras["signal"]) if "signal" in extras else None
    if name is None:
        return DEFAULT_SIGNAL
    when = extras.get("signal_time_s")
    time_s = when if isinstance(when, int) and not isinstance(when, bool) and when >= 0 else None
    target = "batch" if extras.get("signal_batch") == 1 else "steps"
    return SignalSpec(name, target, SLURM_DEFAULT_SIGNAL_TIME_S if time_s is None else time_s)


def notice_seconds(settings: NoticeSettings, qos: str | None, spec: SignalSpec) -> int:
    """The notice a job of class ``qos`` gets: the class's, or less when the job asked for less."""
    full = settings.for_class(qos)
    return full if spec.time_s is None else min(full, spec.time_s)
