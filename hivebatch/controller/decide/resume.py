"""Step 2: requeued jobs resume first, each with the gres it was pinned with.

They ran before, so newer work must not starve them. One that carries a typed GPU gres
(``gpu:g3:1,…``), which Slurm cannot re-type safely, is never given other indices: it resumes on any
node(s) where the same indices are free (first the nodes it ran on), or keeps waiting. One pinned with
a plain count (``gpu:2``) resumes where Slurm can only pick GPUs held for it (``untyped``). A
guaranteed job of the policy round may still preempt them before they start.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial

from hivebatch.cells.resume import resume_nodes, symmetric_indices, take
from hivebatch.controller.decide.fit import unfit_text
from hivebatch.controller.decide.gres import gres_for, untyped_count
from hivebatch.controller.decide.isolate import isolated
from hivebatch.controller.decide.tasks import start_prediction
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.decide.untyped import leaving_nodes, resume_untyped, waits_untyped
from hivebatch.controller.decide.victims import take_victims
from hivebatch.controller.decide.whole import note_whole
from hivebatch.db.models import Job
from hivebatch.qos import Shape
from hivebatch.request import JobRequest


def _pinned_before(job: Job, idx: list[int]) -> str:
    # a job Slurm never started was taken back from its pin, not requeued
    return f"{'requeued' if job.start_time is not None else 'taken back'} with GPUs {idx} per node"


def _waits_for(job: Job, idx: list[int], nodes: int) -> str:
    return f"{_pinned_before(job, idx)}; waits until {nodes} node(s) have those indices free"


def _typed_nodes(r: Round, req: JobRequest) -> set[str]:
    return {n.name for n in r.ctx.spec.nodes if req.gpu_type is None or n.gpu_type == req.gpu_type}


def _unusable(r: Round, job: Job, req: JobRequest) -> dict[str, str]:
    """The nodes of its GPU type it may not go to now, and why."""
    sj = r.ledger.slurm.get(job.slurm_job_id)
    cannot = dict(r.unfit_for(job, sj)) if sj is not None else {}
    for name in r.ledger.bad_nodes:
        cannot.setdefault(name, "takes no new work")
    typed = _typed_nodes(r, req)
    return {n: why for n, why in cannot.items() if n in typed}


def _cannot_use(r: Round, job: Job, req: JobRequest) -> str:
    # seen on the lab: a job taken back from node1 while the other nodes were drained waited "until 1
    # node(s) have those indices free", which node1 had
    cannot = _unusable(r, job, req)
    return f"; it cannot use {unfit_text(cannot)}" if cannot else ""


def _eligible(r: Round, job: Job, req: JobRequest) -> Callable[[str], bool]:
    """May the job go to this node at all: healthy, of its GPU type, with what it needs besides GPUs."""
    node_type = {n.name: n.gpu_type for n in r.ctx.spec.nodes}
    sj = r.ledger.slurm.get(job.slurm_job_id)
    unfit = r.unfit_for(job, sj) if sj is not None else {}

    def eligible(n: str) -> bool:
        return (
            n not in r.ledger.bad_nodes
            and n not in unfit
            and (req.gpu_type is None or node_type.get(n) == req.gpu_type)
        )

    return eligible


def resume_typed(r: Round, job: Job, req: JobRequest) -> Place | str:
    """Place a requeued job on the same GPU indices it had (any nodes), or say why it waits."""
    old = {n: sorted(v) for n, v in (job.placement or {}).items()}
    idx = symmetric_indices(old)
    if idx is None:
        return "its earlier placement had different GPU indices per node; it cannot be re-placed"
    want_nodes = len(old)
    eligible = _eligible(r, job, req)
    # a node where its VC's cells would take what another VC's guarantee needs is passed over for the next
    refused: set[str] = set()
    why = "its VC has no room now"
    while True:
        chosen = resume_nodes(
            r.gmap, list(old), idx, req.vc, req.priority, lambda n: eligible(n) and n not in refused
        )
        if chosen is None:
            waits = f"{_pinned_before(job, idx)}; {why}" if refused else _waits_for(job, idx, want_nodes)
            return waits + _cannot_use(r, job, req)
        placement = {n: list(idx) for n in chosen}
        decision = r.alloc.adopt(str(job.slurm_job_id), req.vc, req.priority, placement, keep_guarantees=True)
        if decision.result == "placed":
            break
        why = decision.reason or decision.error or why
        refused.add(chosen[-1])
    take(r.gmap, placement, req.vc, str(job.slurm_job_id))  # keep the map current for the next requeued job
    return Place(job, placement, gres_for(idx), (want_nodes, len(idx)), resumed=True)


def resume_requeued(r: Round) -> None:
    """Guaranteed work first, then arrival order; a job needing more GPUs than are idle waits at once."""
    r.requeued.sort(key=lambda jr: (-jr[1].priority, jr[0].submit_time or r.now, jr[0].slurm_job_id))
    idle = [
        sum(1 for g in r.gmap.values() for u in g.values() if u.job is None and not u.bad and not u.foreign)
    ]
    # victims are chosen later, by the policy round (``settle`` checks those)
    leaving = leaving_nodes(r) if r.requeued else set()
    for job, req in r.requeued:
        isolated(r, job, partial(_resume_one, r, job, req, idle, leaving))


def _resume_one(r: Round, job: Job, req: JobRequest, idle: list[int], leaving: set[str]) -> None:
    """``idle``: GPUs still idle, in a one-item list the jobs resumed before this one update."""
    per_node = untyped_count(job.gres)
    if req.gpus > idle[0]:
        old = job.placement or {}
        why = (
            waits_untyped(per_node, len(old))
            if per_node is not None
            else _waits_for(job, symmetric_indices(old) or [], len(old))
        )
        r.out.waits.append(Wait(job, why))
        return
    if r.found is None and r.ctx.settings.backfill:
        # who heads a VC's reservation is asked of the cells as the cycle found them (about 40 ms on 256
        # nodes, so only in a cycle where a requeued job may resume)
        r.found = r.alloc.fork()
    if per_node is not None:
        placed = resume_untyped(r, job, req, _eligible(r, job, req), leaving)
    else:
        placed = resume_typed(r, job, req)
    if isinstance(placed, str):
        # no node it may use now: when it starts is not known (hq showed START "now" for such a job)
        nowhere = _typed_nodes(r, req) <= set(_unusable(r, job, req))
        r.out.waits.append(Wait(job, placed, not_startable=nowhere))
        return
    if str(job.gres or "").startswith("shard:"):
        # it held its GPU as shards before (Slurm keeps that gres): it leaves the rest again
        placed.gres = job.gres
        note_whole(r.ledger.sharing, job, req, placed.placement)
    idle[0] -= req.gpus
    take_victims(r, placed, [])  # the opportunistic jobs that keep its nodes to their users (ExclusiveUser)
    r.add_place(_predicted(r, placed, req))


def _predicted(r: Round, place: Place, req: JobRequest) -> Place:
    """``place`` with its end and slack predicted as a fresh placement's are: a requeued job runs again
    from its start, on the shape it resumes on.

    Without them hq and the backfill reservations would take Slurm's end of the job, which is a year
    after its start when it has no time limit."""
    sj = r.ledger.slurm.get(place.job.slurm_job_id)
    shape = Shape(*place.shape) if place.shape else None
    lat, ect, slack = start_prediction(r, place.job, req, sj, shape)
    if lat is not None:  # else it resumes all the same, without figures
        place.predicted_end = r.now + dt.timedelta(seconds=lat)
        place.ect, place.slack_s = ect, slack
    return place
