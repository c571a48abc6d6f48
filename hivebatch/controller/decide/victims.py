"""Booking the jobs a placement preempts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from hivebatch.controller.decide.fit import yielding_in_the_way
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.observe import phase
from hivebatch.notice import notice_seconds, signal_of
from hivebatch.request import plugin_extras
from hivebatch.slurm.types import SlurmJob, shown_id


def take_victims(r: Round, p: Place, victims: Iterable[object]) -> None:
    """Book the jobs ``p`` preempts: those on its cells, and the opportunistic jobs whose users keep its
    nodes to themselves. A victim placed earlier in this very round never started: it is taken back and
    simply keeps waiting instead of being requeued."""
    sj = r.ledger.slurm.get(p.job.slurm_job_id)
    in_the_way = _kept_off_by(r, sj, p.placement) if sj is not None else []
    on_cells = [str(v) for v in victims]
    _tell_to_leave(r, p, [sid for sid in in_the_way if str(sid) not in on_cells])
    for victim in on_cells:
        v = r.by_sid.get(victim)
        if v is None:
            continue
        if v.slurm_job_id in r.placed_now:
            r.out.places.remove(r.placed_now.pop(v.slurm_job_id))
            taker = shown_id(p.job.slurm_job_id, r.ledger.slurm)
            r.out.waits.append(Wait(v, f"its GPUs went to job {taker} before it started"))
            continue
        r.out.victims[v.slurm_job_id] = p.job.slurm_job_id
        p.preempts.append(v.slurm_job_id)


def _tell_to_leave(r: Round, p: Place, in_the_way: Iterable[int]) -> None:
    """Give the jobs that keep ``p``'s nodes to their users the notice a victim of the cells gets (its
    class's, or less when it asked for less), or requeue them now when that is none. ``p`` is pinned at
    once: Slurm starts it when they have left (unstarted.grace_on counts their notice)."""
    for sid in in_the_way:
        v = r.by_sid.get(str(sid))
        if v is None or v.notice_until is not None or sid in r.out.notices:
            continue  # not hivebatch's, or already leaving
        spec = signal_of(plugin_extras(r.ledger.slurm.get(sid)))
        notice_s = notice_seconds(r.ctx.notice, v.qos, spec)
        if notice_s > 0:
            r.out.notices[sid] = (p.job.slurm_job_id, r.now + dt.timedelta(seconds=notice_s))
        else:
            r.out.victims[sid] = p.job.slurm_job_id
            p.preempts.append(sid)


def _kept_off_by(r: Round, sj: SlurmJob, nodes: Iterable[str]) -> list[int]:
    """The running jobs of other users that keep ``sj`` off ``nodes`` through an ExclusiveUser partition
    and that it may tell to leave (``fit.yielding_in_the_way``): the cells' guarantee asks them to."""
    away: dict[str, frozenset[str]] = {}
    for name in nodes:
        node = r.ledger.nodes.get(name)
        if node is not None and (users := yielding_in_the_way(sj, node)):
            away[name] = users
    if not away:
        return []
    return sorted(
        sid
        for sid, other in r.ledger.slurm.items()
        if phase(other.state) == "running" and any(other.user in away.get(n, ()) for n in other.nodes)
    )
