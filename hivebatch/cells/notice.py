"""Preemption with notice: a running victim is told to leave before its GPUs change hands.

A placement that would preempt running jobs does not take their GPUs at once. The victims get a
notice (the caller signals them) and keep their cells until they leave or the notice ends; the
preempting job waits meanwhile. The next rounds find the same victims again (a job in notice has
nothing left to lose, see ``at_stake`` in state.py) and wait on the same notice, until the victims
are gone and the GPUs are simply free. Times are seconds on the caller's clock (epoch or virtual).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hold:
    """Why a placement waits: the victims it waits for and when the last notice ends."""

    victims: tuple[str, ...]
    until: float
    told: dict[str, float]  # victims to tell now -> when their notice ends
    names: Mapping[str, str] = field(default_factory=dict)  # victim -> as its owner sees it, if not its id

    def reason(self) -> str:
        jobs = ", ".join(self.names.get(v, v) for v in self.victims)
        word = "job" if len(self.victims) == 1 else "jobs"
        return f"waiting for {word} {jobs} to leave its GPUs, notice ends at {clock(self.until)}"


def clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


@dataclass
class NoticeBook:
    """Who gets a notice, and who has one, for one scheduling round (plain data in, notices out).

    ``notice_s``: per running job, the notice it gets if preempted now (absent or 0: preempted at
    once, e.g. a job placed but not started). ``leaving``: jobs told in an earlier round -> when their
    notice ends. ``claimants``: jobs that told guaranteed victims to leave (in an earlier round) and
    still wait; each goes first in its VC's queue, so the GPUs its victims give back are not given to
    another job of the VC (which it would tell to leave in turn, round after round).
    ``told``: filled by the round, victim -> (the job that needs its GPUs, end of notice). ``names``: jobs
    whose owners see them under another name than their id (an array's task as 1948_3), for reasons.
    """

    now: float
    notice_s: Mapping[str, float] = field(default_factory=dict)
    leaving: Mapping[str, float] = field(default_factory=dict)
    claimants: frozenset[str] = frozenset()
    told: dict[str, tuple[str, float]] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)

    def hold(self, victims: Iterable[str]) -> Hold | None:
        """The wait a placement preempting ``victims`` must make, None when it can take them now."""
        waits: dict[str, float] = {}
        new: dict[str, float] = {}
        for v in victims:
            if v in self.leaving:
                waits[v] = self.leaving[v]
            elif v in self.told:
                waits[v] = self.told[v][1]
            elif self.notice_s.get(v, 0) > 0:
                waits[v] = new[v] = self.now + self.notice_s[v]
        if not waits:
            return None
        return Hold(tuple(sorted(waits, key=lambda j: (len(j), j))), max(waits.values()), new, self.names)

    def tell(self, by: str, hold: Hold) -> None:
        for v, until in hold.told.items():
            self.told.setdefault(v, (by, until))

    def withdraw(self, by: str) -> None:
        """``by`` was placed after all (another shape, later in the round): its victims stay unwarned."""
        for v in [v for v, (who, _) in self.told.items() if who == by]:
            del self.told[v]
