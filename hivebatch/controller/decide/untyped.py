"""Untyped pins: a placement said to Slurm as a plain GPU count (``gpu:2``) where Slurm has no choice.

Slurm 22.05 never re-types a typed gres, so a requeued job pinned typed comes back only on its old
indices (``resume.resume_typed``), often not before its preemptor ends. An untyped job can come back on
any GPUs, but Slurm picks them among those free on the node, by CPU affinity rather than index
(tests/fixtures/slurm/untyped_gres_requeue.txt), and it refuses to type an untyped gres later
(err_update_untyped_to_typed.txt). Hence:

- a new placement is pinned untyped only where the GPUs Slurm sees free on each node are exactly the
  ones chosen and no GPU there is freed this cycle; otherwise it is typed as before;
- a requeued untyped job resumes on node(s) where the GPUs Slurm sees free are all its VC's to give
  and at least its count. It holds all of them until Slurm has started it, then keeps the ones Slurm
  chose (``reconcile.machine.granted_kept``), so whatever Slurm picks was reserved for it.

"Freed this cycle" covers victims requeued now, jobs under notice, which may leave any moment, and jobs
this cycle's reconcile requeued while Slurm still ran them: a GPU they free before Slurm starts the job
would give Slurm a choice. A GPU freed by a job that simply
ends in that second is the one race left; Slurm's pick is then checked like any other
(``granted_kept``: outside what was held, the job is requeued at once, having run for an instant).
"""

from __future__ import annotations

from collections.abc import Callable

from hivebatch.cells.resume import free_for, take
from hivebatch.controller.decide.gres import untyped_count, untyped_gres
from hivebatch.controller.decide.types import GpuMap, Place, Round, Wait
from hivebatch.controller.observe import phase
from hivebatch.controller.reconcile.slurm_view import gpus_of
from hivebatch.db.models import Job
from hivebatch.request import JobRequest


def holds(per_node: int) -> str:
    """The reason a job holding more GPUs than its count gives while Slurm has not started it."""
    return f"holds the GPUs free on its node(s) until Slurm has picked {per_node} per node among them"


def slurm_free(r: Round, node: str) -> set[int] | None:
    """The GPU indices Slurm would consider free on ``node`` (released jobs not yet started count as
    free there); None when Slurm does not report the node."""
    seen = r.ledger.nodes.get(node)
    if seen is None:
        return None
    busy = {int(i) for i in seen.gpus_used} | {int(i) for i in seen.gpus_shared}
    return {int(i) for i in seen.gpu_indices} - busy


def leaving_nodes(r: Round) -> set[str]:
    """Nodes where GPUs may be freed before this cycle's placements start."""
    ids = set(r.out.victims) | set(r.out.notices)
    nodes: set[str] = set()
    for job in r.ledger.jobs.values():
        if job.placement and (
            job.slurm_job_id in ids or job.intent == "preempt" or job.notice_until is not None
        ):
            nodes.update(job.placement)
        elif job.state == "preempted":
            nodes.update(_requeued_now(r, job))
    return nodes


def _requeued_now(r: Round, job: Job) -> set[str]:
    """The nodes of a job this cycle's reconcile requeued (a placement incident) while Slurm, as last
    seen, still ran it there: its GPUs free in the second its requeue takes. Left out, the next exact
    pin on that node raced the requeue and lost every time (in three of five lab replays)."""
    sj = r.ledger.slurm.get(job.slurm_job_id)
    if sj is None or phase(sj.state) != "running":
        return set()
    return set(gpus_of(sj)) | set(job.placement or {})


def pin_untyped(r: Round, placement: dict[str, list[int]], leaving: set[str]) -> str | None:
    """``gpu:N`` for a new placement Slurm can only grant as chosen; None: it is typed."""
    if not r.ctx.settings.untyped_gres or not placement:
        return None
    counts = {len(v) for v in placement.values()}
    if len(counts) != 1:
        return None
    for node, idx in placement.items():
        if node in leaving or slurm_free(r, node) != set(idx):
            return None
    return untyped_gres(counts.pop())


def hold_whole_cell(
    r: Round, place: Place, req: JobRequest | None, leaving: set[str], gmap: GpuMap
) -> str | None:
    """``gpu:1`` for a placement of one GPU per node where the GPUs Slurm sees free are exactly the
    smallest cell around the chosen one (its pair on a PCIe switch, say): the buddy allocator places
    every GPU of that cell alike, so Slurm may pick either. The job holds the cell until Slurm has
    started it. A wider choice is never left to Slurm, whose CPU-affinity pick could split a cell the
    allocator keeps whole. None: no such cell, and ``place`` is as it was."""
    if not r.ctx.settings.untyped_gres or req is None:
        return None
    if any(len(idx) != 1 for idx in place.placement.values()):
        return None
    wider: dict[str, list[int]] = {}
    for node, idx in place.placement.items():
        free = slurm_free(r, node)
        if node in leaving or free is None or len(free) < 2 or free != r.alloc.sibling_cell(node, idx[0]):
            return None
        if not free_for(gmap.get(node, {}), sorted(free - set(idx)), req.vc, req.priority):
            return None
        wider[node] = sorted(free)
    jid = str(place.job.slurm_job_id)
    r.alloc.release(jid)
    if r.alloc.adopt(jid, req.vc, req.priority, wider, keep_guarantees=True).result != "placed":
        r.alloc.adopt(jid, req.vc, req.priority, place.placement)
        return None
    take(gmap, wider, req.vc, jid, opportunistic=req.priority < 0)
    place.placement = wider
    place.note = holds(1)
    return untyped_gres(1)


def _candidates(
    r: Round, job: Job, req: JobRequest, per_node: int, eligible: Callable[[str], bool], leaving: set[str]
) -> list[tuple[str, list[int]]]:
    """Nodes where Slurm's free GPUs are at least ``per_node`` and all free for the job's VC: exact
    fits first (nothing held beyond the job's count), then its old nodes, fewest GPUs held first."""
    old = set(job.placement or {})
    found: list[tuple[bool, int, bool, str, list[int]]] = []
    for node in r.gmap:
        if node in leaving or not eligible(node):
            continue
        free = slurm_free(r, node)
        if free is None or len(free) < per_node:
            continue
        idx = sorted(free)
        if free_for(r.gmap[node], idx, req.vc, req.priority):
            found.append((len(idx) != per_node, len(idx), node not in old, node, idx))
    found.sort()
    return [(node, idx) for *_rest, node, idx in found]


def resume_untyped(
    r: Round, job: Job, req: JobRequest, eligible: Callable[[str], bool], leaving: set[str]
) -> Place | str:
    """Place a requeued untyped job where Slurm can only pick GPUs held for it, or say why it waits.
    ``leaving``: the nodes where GPUs free this cycle, as far as the round has decided yet."""
    per_node = untyped_count(job.gres) or 0
    want = len(job.placement or {}) or 1
    refused: set[str] = set()
    why = ""
    candidates = _candidates(r, job, req, per_node, eligible, leaving)
    while True:
        fits = [c for c in candidates if c[0] not in refused][:want]
        if len(fits) < want:
            return waits_untyped(per_node, want) + (f" ({why})" if why else "")
        placement = dict(fits)
        decision = r.alloc.adopt(str(job.slurm_job_id), req.vc, req.priority, placement, keep_guarantees=True)
        if decision.result == "placed":
            break
        why = decision.reason or decision.error or why
        refused.add(fits[-1][0])
    take(r.gmap, placement, req.vc, str(job.slurm_job_id))  # keep the map current for the next requeued job
    place = Place(job, placement, job.gres, (want, per_node), resumed=True)
    if any(len(idx) > per_node for idx in placement.values()):
        place.note = holds(per_node)
    return place


def waits_untyped(per_node: int, nodes: int) -> str:
    return (
        f"requeued with {per_node} GPU(s) per node (Slurm picks which); waits until {nodes} node(s) have"
        " at least that many GPUs free and no GPU free there that is not free for it"
    )


def recheck_resumed(r: Round, leaving: set[str]) -> None:
    """A requeued untyped job resumed before the policy round chose its victims: where a victim now
    frees GPUs on its node, Slurm could give it those, so it waits for the next cycle instead."""
    for place in list(r.out.places):
        if not place.resumed or untyped_count(place.gres) is None:
            continue
        gone = sorted(set(place.placement) & leaving)
        if gone:
            r.alloc.release(str(place.job.slurm_job_id))
            r.out.places.remove(place)
            r.placed_now.pop(place.job.slurm_job_id, None)
            why = f"GPUs on {', '.join(gone)} are freed this cycle, so Slurm could pick them; it resumes next cycle"
            r.out.waits.append(Wait(place.job, why))
