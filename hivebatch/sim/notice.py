"""Preemption with notice on the simulator's clock: the same cell core decisions as the controller.

Before each round the cell core learns what every running job would lose if preempted now (the GPU
time of its current run) and the notice it would get; after the round, the victims it told to leave
leave: a job that checkpoints on its signal saves and leaves ``save_s`` later, keeping its progress;
any other dies of the default SIGTERM at once and loses its run. Without a ``SimNotice`` the
simulator preempts at once, as hivebatch did before notices (``notice_s=0, least_loss=False``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hivebatch.cells.notice import NoticeBook

if TYPE_CHECKING:
    from hivebatch.sim.engine import JobRecord, Simulation


@dataclass(frozen=True)
class SimNotice:
    notice_s: float = 120.0  # 0: victims are preempted at once
    least_loss: bool = True  # victims chosen by the work they would lose
    save_s: float = 30.0  # a checkpointing job saves and leaves this long after its signal
    # a requeued job may start again only this long after it left: Slurm sets its begin time to the
    # requeue + AuthInfo's cred_expire + 1 s (the lab, cred_expire=10: eligible 11 s later)
    requeue_delay_s: float = 0.0
    # a requeued job starts again only once its old GPU indices are free somewhere (hivebatch.sim.indices)
    keeps_indices: bool = False
    # with keeps_indices: a job placed on exactly the GPUs free on its nodes was pinned untyped, and
    # requeued waits only for nodes whose free GPUs are all its VC's to use (controller.untyped_gres)
    untyped_pins: bool = False


def gpus(rec: JobRecord) -> int:
    return sum(len(g) for g in rec.placement.values())


def prime(sim: Simulation, now: float) -> None:
    """Tell the cell core the work at stake and the notices, before a round."""
    rule = sim.notice
    if rule is None:
        return
    sim.alloc.release_notice_holds()
    stake: dict[str, float] = {}
    notice_s: dict[str, float] = {}
    leaving: dict[str, float] = {}
    for jid, rec in sim.running.items():
        if rec.leaving is not None:
            leaving[jid] = rec.leaving
            stake[jid] = 0.0
            continue
        stake[jid] = rec.ran_s(now) * gpus(rec)
        notice_s[jid] = rule.notice_s
    victims = [*sim.running.values(), *sim.waiting.values()]  # told_by is cleared once a victim is placed
    claimants = frozenset(r.told_by for r in victims if r.told_by and r.told_by in sim.waiting)
    sim.alloc.at_stake = stake if rule.least_loss else {}
    sim.alloc.notice = NoticeBook(now, notice_s, leaving, claimants) if rule.notice_s > 0 else None


def told(sim: Simulation, now: float) -> list[tuple[JobRecord, float]]:
    """The victims told to leave this round, each with the time it leaves (and saves, if it does)."""
    book = sim.alloc.notice if sim.notice is not None else None
    if book is None:
        return []
    out: list[tuple[JobRecord, float]] = []
    for jid, (by, until) in book.told.items():
        rec = sim.running.get(jid)
        if rec is None or rec.leaving is not None:
            continue
        rec.leaving = until
        if jid not in sim.opp_ids:  # an opportunistic victim resumes on any free GPU: it claims nothing back
            rec.told_by = by
        assert sim.notice is not None and rec.start is not None
        if rec.job.checkpoints:
            rec.saved_at = now
            out.append((rec, min(now + sim.notice.save_s, until)))
        else:
            out.append((rec, now))
    book.told.clear()
    return out


def progress_kept(rec: JobRecord) -> float:
    """The fraction of the whole job saved by a checkpoint at ``rec.saved_at`` (0 without one)."""
    if rec.saved_at is None or rec.start is None or rec.run_s <= 0:
        return rec.saved_fraction
    this_run = min(1.0, max(0.0, rec.saved_at - rec.start) / rec.run_s)
    return rec.saved_fraction + (1.0 - rec.saved_fraction) * this_run
