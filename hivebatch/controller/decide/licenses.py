"""Licenses (-L): Slurm starts a job only once the licenses it asks are free, counting a job's licenses
from its start. A GPU job pinned while they are taken waits on ``Licenses`` holding its GPUs for nothing
(recorded: tests/fixtures/slurm/licenses.txt), so such a job waits without cells, and of the jobs one
round would pin, those beyond the free licenses wait too. Its predicted start is when the jobs holding
them end (``licenses_free_at``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

from hivebatch.controller.decide.times import epoch, from_epoch
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.observe import phase
from hivebatch.db.models import Job
from hivebatch.slurm.parse import license_asks, take_licenses
from hivebatch.slurm.types import SlurmJob


def short_of_licenses(sj: SlurmJob, left: Mapping[str, int] | None) -> str | None:
    """Why the job waits for licenses. ``left``: each license's free count, less what pins Slurm has not
    started ask (None: not listed). Licenses Slurm does not list, and forms only Slurm reads, are
    Slurm's to judge."""
    if left is None or not sj.licenses:
        return None
    asks = license_asks(sj.licenses) or {}
    short = [
        f"{name} ({max(0, left[name])} free, it needs {count})"
        for name, count in asks.items()
        if name in left and count > left[name]
    ]
    return f"waits for licenses: {', '.join(short)}; it holds no GPUs meanwhile" if short else None


def licenses_wait(r: Round, job: Job, sj: SlurmJob, reason: str) -> Wait:
    """The wait of a job short of licenses, with its predicted start when they are free."""
    return Wait(job, reason, not_startable=True, predicted_start=licenses_free_at(r, sj))


def licenses_free_at(r: Round, sj: SlurmJob) -> dt.datetime | None:
    """When as many of each license ``sj`` asks are free as it asks: the jobs holding them (running ones,
    pins Slurm has not started, this round's placements) end in order, at their predicted ends or time
    limits. None where an end on the way is unknown, or the cluster has fewer than it asks."""
    asks = license_asks(sj.licenses)
    if r.licenses_left is None or not asks:
        return None
    left = dict(r.licenses_left)
    holders = [(end, held) for sid, end, held in held_licenses(r) if sid != sj.job_id]
    for place in r.out.places:  # this round's placements take theirs now and give them back at their ends
        placed = r.ledger.slurm.get(place.job.slurm_job_id)
        if placed is None or not placed.licenses:
            continue
        take_licenses(left, placed.licenses)
        took = license_asks(placed.licenses)
        if took and place.job.slurm_job_id != sj.job_id:
            holders.append((_end(r, placed, place.job, place), took))
    frees: dict[str, list[tuple[float, int]]] = {}
    for end, held in holders:
        for name, count in held.items():
            frees.setdefault(name, []).append((end, count))
    at = epoch(r.now)
    for name, need in asks.items():
        have = left.get(name)
        if have is None:
            continue  # Slurm does not list it: Slurm's to judge
        for end, count in sorted(frees.get(name, [])):
            if have >= need:
                break
            have, at = have + count, max(at, end)
        if have < need or not math.isfinite(at):
            return None
    return from_epoch(at)


def held_licenses(r: Round) -> list[tuple[int, float, dict[str, int]]]:
    """The jobs holding licenses before this round places any: running ones and ``Round.license_pins``,
    each with its Slurm id, its end (inf when unknown) and what it holds. Listed once a round: every job
    waiting for licenses walks them."""
    if r.license_holders is None:
        r.license_holders = []
        for sid, other in r.ledger.slurm.items():
            if not other.licenses or (phase(other.state) != "running" and sid not in r.license_pins):
                continue
            held = license_asks(other.licenses)
            if held:
                r.license_holders.append((sid, _end(r, other, r.ledger.jobs.get(sid), None), held))
    return r.license_holders


def _end(r: Round, sj: SlurmJob, job: Job | None, place: Place | None) -> float:
    predicted = (place.predicted_end if place is not None else None) or (job.predicted_end if job else None)
    if predicted is not None:
        return max(epoch(predicted), epoch(r.now))
    if sj.time_limit_s:
        start = epoch(sj.start_time) if sj.start_time is not None else epoch(r.now)
        return max(start + sj.time_limit_s, epoch(r.now))
    return math.inf


def hold_back_licensed(r: Round) -> None:
    """Of the round's placements, in the order made, those whose licenses earlier ones took wait
    instead, their cells given back. One that preempts others stays: its victims are told already, and
    Slurm's ``Licenses`` has it taken back at the next cycle (``unstarted``)."""
    left = dict(r.licenses_left) if r.licenses_left is not None else None
    if left is None:
        return
    for place in list(r.out.places):
        sj = r.ledger.slurm.get(place.job.slurm_job_id)
        if sj is None or not sj.licenses:
            continue
        jid = str(place.job.slurm_job_id)
        short = short_of_licenses(sj, left)
        if short is None or place.preempts or jid not in r.alloc.jobs():
            take_licenses(left, sj.licenses)
            continue
        r.out.places.remove(place)
        r.placed_now.pop(place.job.slurm_job_id, None)
        r.alloc.release(jid)
        r.out.waits.append(licenses_wait(r, place.job, sj, short))
