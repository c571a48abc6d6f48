"""Licenses (-L): Slurm starts a job only once the licenses it asks are free, counting a job's licenses
from its start. A GPU job pinned while they are taken waits on ``Licenses`` holding its GPUs for nothing
(recorded: tests/fixtures/slurm/licenses.txt), so such a job waits without cells, and of the jobs one
round would pin, those beyond the free licenses wait too.
"""

from __future__ import annotations

from collections.abc import Mapping

from hivebatch.controller.decide.types import Round, Wait
from hivebatch.slurm.parse import license_asks
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
            for name, count in (license_asks(sj.licenses) or {}).items():
                left[name] = left.get(name, 0) - count
            continue
        r.out.places.remove(place)
        r.placed_now.pop(place.job.slurm_job_id, None)
        r.alloc.release(jid)
        r.out.waits.append(Wait(place.job, short, not_startable=True))
