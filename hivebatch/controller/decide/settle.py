"""Step 6: each placement's GRES — a plain GPU count where Slurm can only grant the chosen GPUs,
typed per-index GPUs, or shards for a whole-GPU job that leaves memory to slices. An asymmetric
multi-node placement that is not untyped cannot be said in Slurm's per-node gres: it is given back and
the job waits."""

from __future__ import annotations

from functools import partial

from hivebatch.cells.resume import symmetric_indices
from hivebatch.controller.decide.gres import gres_for
from hivebatch.controller.decide.isolate import isolated
from hivebatch.controller.decide.types import GpuMap, Place, Round, Wait
from hivebatch.controller.decide.untyped import hold_whole_cell, leaving_nodes, pin_untyped, recheck_resumed
from hivebatch.controller.decide.whole import whole_gres
from hivebatch.request import plugin_extras


def settle_gres(r: Round) -> None:
    if not any(p.placement for p in r.out.places):
        return
    leaving = leaving_nodes(r)
    recheck_resumed(r, leaving)
    gmap: list[GpuMap] = []  # the map after the round, made once and only if a placement needs it
    for place in list(r.out.places):
        if place.placement and place.gres is None:
            isolated(r, place.job, partial(_settle_one, r, place, leaving, gmap))


def _settle_one(r: Round, place: Place, leaving: set[str], gmap: list[GpuMap]) -> None:
    idx = symmetric_indices(place.placement)
    pair = r.reqs.get(str(place.job.slurm_job_id))
    req = pair[1] if pair is not None else None
    if idx is not None:
        place.gres = whole_gres(r.ledger.sharing, place.job, req, place.placement)
    if not _whole_node(r, place):
        place.gres = place.gres or pin_untyped(r, place.placement, leaving)
    if place.gres is None and r.ctx.settings.untyped_gres:
        if not gmap:
            gmap.append(r.alloc.gpu_map())
        place.gres = hold_whole_cell(r, place, req, leaving, gmap[0])
    if place.gres is not None:
        return
    if idx is None:
        r.alloc.release(str(place.job.slurm_job_id))
        r.out.places.remove(place)
        r.placed_now.pop(place.job.slurm_job_id, None)
        r.out.waits.append(Wait(place.job, "no placement with the same GPU indices on every node is free"))
        return
    place.gres = gres_for(idx)


def _whole_node(r: Round, place: Place) -> bool:
    """An --exclusive job: Slurm gives it one GRES record per GPU type of its nodes, here one per index,
    so only a typed pin lets its steps inherit the job's GPUs. Pinned as a count, every ``srun`` in it
    failed on the lab ("Step requested gres_per_node=gpu:8 is more than the job's gres_per_node=gpu:1",
    tests/fixtures/slurm/exclusive_step_gres.txt)."""
    return bool(plugin_extras(r.ledger.slurm.get(place.job.slurm_job_id)).get("exclusive"))


def attach_notes(r: Round) -> None:
    """What the profile store said about a job's model reaches its owner: the placed job's reason,
    or after a waiting job's reason."""
    notes = dict(r.builder.notes)
    for sid, why in r.run_notes.items():
        notes[sid] = f"{why}; {notes[sid]}" if sid in notes else why
    if not notes:
        return
    for place in r.out.places:
        place.note = "; ".join(n for n in (place.note, notes.get(place.job.slurm_job_id)) if n) or None
    for wait in r.out.waits:
        note = notes.get(wait.job.slurm_job_id)
        if note and not wait.rejected:
            wait.reason = f"{wait.reason} ({note})"
