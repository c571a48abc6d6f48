"""Step 6: each placement's GRES — typed per-index GPUs, or shards for a whole-GPU job that leaves
memory to slices. An asymmetric multi-node placement cannot be said in Slurm's per-node gres: it is
given back and the job waits."""

from __future__ import annotations

from functools import partial

from hivebatch.cells.resume import symmetric_indices
from hivebatch.controller.decide.gres import gres_for
from hivebatch.controller.decide.isolate import isolated
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.decide.whole import whole_gres


def settle_gres(r: Round) -> None:
    for place in list(r.out.places):
        if place.placement and place.gres is None:
            isolated(r, place.job, partial(_settle_one, r, place))


def _settle_one(r: Round, place: Place) -> None:
    idx = symmetric_indices(place.placement)
    if idx is None:
        r.alloc.release(str(place.job.slurm_job_id))
        r.out.places.remove(place)
        r.placed_now.pop(place.job.slurm_job_id, None)
        r.out.waits.append(Wait(place.job, "no placement with the same GPU indices on every node is free"))
        return
    pair = r.reqs.get(str(place.job.slurm_job_id))
    req = pair[1] if pair is not None else None
    place.gres = whole_gres(r.ledger.sharing, place.job, req, place.placement) or gres_for(idx)


def attach_notes(r: Round) -> None:
    """What the profile store said about a job's model reaches its owner: the placed job's reason,
    or after a waiting job's reason."""
    notes = dict(r.builder.notes)
    for sid, why in r.class_notes.items():
        notes[sid] = f"{why}; {notes[sid]}" if sid in notes else why
    if not notes:
        return
    for place in r.out.places:
        place.note = notes.get(place.job.slurm_job_id)
    for wait in r.out.waits:
        note = notes.get(wait.job.slurm_job_id)
        if note and not wait.rejected:
            wait.reason = f"{wait.reason} ({note})"
