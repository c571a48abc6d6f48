"""Rebuild the cell allocator from the reconciled ledger, every cycle.

It starts from the previous cycle's snapshot (so VC cells stay bound to the same physical cells and
packing decisions survive), then: jobs the ledger no longer lists as holding GPUs are released, jobs
it lists that the snapshot lacks (or holds elsewhere) are ``adopt``-ed at their real placement,
foreign GPUs and bad nodes are set afresh from this cycle's observation. A missing or unreadable
snapshot just means adopting everything — so a stale or lost snapshot can never make the controller
hand out GPUs twice.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from hivebatch.cells import OPPORTUNISTIC, CellAllocator, ClusterSpec, NodeSpec
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import Observation
from hivebatch.controller.record import Recorder, set_state
from hivebatch.db.models import CellSnapshot, Job
from hivebatch.slurm.types import SlurmNode
from hivebatch.state.shares import get_state

Used = dict[str, set[int]]  # node -> GPU indices some job of the ledger holds


def is_slice_job(job: Job) -> bool:
    """A job granted a slice of one GPU (``shard:gN:k``, one GPU asked): the sharing ledger books it,
    not the cells. A whole-GPU job holding its GPU on each of its nodes as shards asked for more GPUs:
    the cells hold it like any whole-GPU job."""
    from hivebatch.sharing.integration import is_slice_row

    return is_slice_row(job)


def _mark_used(used: Used, placement: dict[str, list[int]]) -> None:
    for n, v in placement.items():
        used.setdefault(n, set()).update(v)


def _holders(ledger: Ledger, rec: Recorder) -> list[Job]:
    """Whole-GPU hsub jobs holding GPUs now, guaranteed work first: if the cells cannot hold
    everything, opportunistic work is what spills over."""
    holders = [
        j
        for j in ledger.jobs.values()
        if not j.foreign
        and not is_slice_job(j)  # slices are booked by the sharing ledger, never as whole GPUs
        and j.placement
        and (j.intent == "place" or (j.state in ("placed", "running") and j.intent != "preempt"))
    ]
    holders.sort(key=lambda j: (-j.priority, j.placed_at or j.submit_time or rec.now, j.slurm_job_id))
    return holders


def _adopt_holders(
    session: Session, rec: Recorder, alloc: CellAllocator, holders: list[Job], used: Used
) -> list[Job]:
    """Make the allocator hold exactly ``holders`` where they are; returns those the cells hold."""
    wanted = {str(j.slurm_job_id): {n: sorted(v) for n, v in (j.placement or {}).items()} for j in holders}
    for jid, state in list(alloc.jobs().items()):
        have = {n: sorted(v) for n, v in state.placement.items()}
        if wanted.get(jid) != have:
            alloc.release(jid)
    kept = set(alloc.jobs())
    in_cells: list[Job] = []  # whole-GPU jobs the cells hold (those holding shards may carry slices)
    for job in holders:
        placement = wanted[str(job.slurm_job_id)]
        _mark_used(used, placement)
        if str(job.slurm_job_id) in kept:
            in_cells.append(job)
            continue
        decision = alloc.adopt(str(job.slurm_job_id), job.vc_name or "", job.priority, placement)
        if decision.result == "placed":
            in_cells.append(job)
            continue
        why = decision.reason or decision.error or "its GPUs conflict with other work"
        if _adopt_beyond_cells(session, rec, alloc, job, placement, why):
            in_cells.append(job)
            continue
        msg = f"cannot be counted in VC {job.vc_name}'s cells ({why}); its GPUs are held as foreign"
        if job.reason != msg:
            job.reason = msg
            rec.event(session, job, "adopt_failed", msg, {"placement": placement})
        _occupy(alloc, f"slurm:{job.slurm_job_id}", placement)
    return in_cells


def _adopt_beyond_cells(
    session: Session, rec: Recorder, alloc: CellAllocator, job: Job, placement: dict[str, list[int]], why: str
) -> bool:
    """A guaranteed job its VC's cells no longer hold (an admin took cells from the VC while it ran,
    or after its placement) keeps its GPUs as opportunistic work, as HiveD downgrades it: held as
    foreign, it would keep the GPUs the other VCs' new cells need until its time limit. Its next
    start waits for its VC's cells. A job of a VC taken out of the config alike: its next start waits
    for its owner to move it to a VC."""
    vc = job.vc_name or ""
    if (
        job.priority < 0
        or alloc.adopt(str(job.slurm_job_id), vc, OPPORTUNISTIC, placement).result != "placed"
    ):
        return False
    _note_beyond_cells(session, rec, alloc, job, placement, why)
    return True


def _note_beyond_cells(
    session: Session, rec: Recorder, alloc: CellAllocator, job: Job, placement: dict[str, list[int]], why: str
) -> None:
    """Tell the owner (reason, event) that ``job`` holds GPUs beyond its VC's cells as opportunistic work."""
    vc = job.vc_name or ""
    if vc in alloc.vcs:
        msg = (
            f"holds GPUs beyond VC {vc}'s cells ({why}): it keeps them as opportunistic work, "
            "preempted when a VC needs them, and waits for its VC's cells if it has to start again"
        )
    else:
        msg = (
            f"holds GPUs of VC {vc}, which the config no longer has: it keeps them as opportunistic work, "
            "preempted when a VC needs them; to start again it must be moved to a VC "
            f"(scontrol update job {job.slurm_job_id} Account=VC)"
        )
    if job.reason != msg:
        job.reason = msg
        rec.event(session, job, "beyond_cells", msg, {"placement": placement})


def _occupy_unseen(alloc: CellAllocator, ledger: Ledger, obs: Observation, used: Used) -> None:
    """Foreign jobs' GPUs, and GPUs busy with work hivebatch cannot see at all (another cluster's
    reservation …): held as foreign so nothing is placed there."""
    for job in ledger.jobs.values():
        if job.foreign and job.state == "running" and job.placement:
            _occupy(alloc, f"slurm:{job.slurm_job_id}", job.placement)
            _mark_used(used, job.placement)
        elif job.intent == "preempt" and job.notice_until is not None and job.placement:
            # its notice is over and act requeues it before any placement: the GPUs Slurm still shows
            # in use are its, and free for this cycle's decisions (a job placed there starts once it left)
            _mark_used(used, job.placement)
    for name, node in obs.nodes.items():
        busy = {int(i) for i in node.gpus_used or []} | {int(i) for i in node.gpus_shared or []}
        stray = sorted(busy - used.get(name, set()))
        if stray:
            _occupy(alloc, f"node:{name}", {name: stray})


def why_unusable(node: NodeSpec, seen: SlurmNode | None) -> str | None:
    """Why no new work may go to ``node`` now: unknown to Slurm, bad or not responding (a node
    slurmctld has not heard from since its restart reports no GPU use at all), or fewer GPUs
    registered than the config gives it; None when it is usable."""
    if seen is None:
        return "not known to Slurm"
    if seen.bad or not seen.responding:
        return f"Slurm state {seen.state}"
    missing = sorted(set(node.gpu_indices) - set(seen.gpu_indices))
    if missing:
        return f"GPUs {missing} not registered with Slurm"
    return None


def _mark_bad_nodes(
    session: Session, rec: Recorder, alloc: CellAllocator, obs: Observation, spec: ClusterSpec
) -> set[str]:
    """Nodes Slurm calls bad, does not know or has not heard from take no new work; an event when that changes."""
    why = {n.name: why_unusable(n, obs.nodes.get(n.name)) for n in spec.nodes}
    bad = {name for name, reason in why.items() if reason}
    for name in sorted(bad):
        alloc.set_node_bad(name)
    stored = get_state(session, "bad_nodes")
    previous = {str(n) for n in stored} if isinstance(stored, list) else set()
    for name in sorted(bad - previous):
        what = why[name]
        rec.event(
            session, None, "node_bad", f"node {name} is bad ({what}): no new work goes there", {"node": name}
        )
    for name in sorted(previous - bad):
        rec.event(session, None, "node_healthy", f"node {name} is healthy again", {"node": name})
    set_state(session, "bad_nodes", sorted(bad), rec.now)
    return bad


def rebuild_allocator(
    session: Session,
    rec: Recorder,
    ledger: Ledger,
    obs: Observation,
    spec: ClusterSpec,
    data: dict[str, Any] | None = None,
) -> CellAllocator:
    """A fresh CellAllocator holding exactly the GPUs granted, running, foreign or bad right now, and
    the sharing ledger of GPU slices on top of it (``ledger.sharing``; ``data`` = the config)."""
    alloc = _start_allocator(session, spec)
    used: Used = {}
    in_cells = _adopt_holders(session, rec, alloc, _holders(ledger, rec), used)
    _rebuild_sharing(session, rec, ledger, alloc, spec, data or {}, used, in_cells)
    _occupy_unseen(alloc, ledger, obs, used)
    ledger.bad_nodes = _mark_bad_nodes(session, rec, alloc, obs, spec)
    ledger.nodes = dict(obs.nodes)
    ledger.licenses = obs.licenses
    ledger.alloc = alloc
    return alloc


def _rebuild_sharing(
    session: Session,
    rec: Recorder,
    ledger: Ledger,
    alloc: CellAllocator,
    spec: ClusterSpec,
    data: dict[str, Any],
    used: Used,
    in_cells: list[Job],
) -> None:
    """Book the slices the ledger's jobs hold (after the whole-GPU jobs: guaranteed work of the cells
    comes first; whole-GPU jobs in ``in_cells`` that hold shards leave the rest of their GPUs to
    slices). A slice that cannot be booked keeps its GPU as foreign work, never handed out twice."""
    from hivebatch.sharing.integration import controller_ledger, downgraded, held_slices

    rows = [j for j in ledger.jobs.values() if is_slice_job(j)]
    led, failed = controller_ledger(alloc, spec, data, rows, in_cells)
    by_id = {str(j.slurm_job_id): j for j in rows}
    held = held_slices(rows)
    for h in held:
        used.setdefault(h.node, set()).add(h.gpu)
    for h in downgraded(led, held):
        job = by_id.get(h.job_id)
        if job is not None:
            _note_beyond_cells(
                session,
                rec,
                alloc,
                job,
                {h.node: [h.gpu]},
                f"no cell of VC {h.vc} holds {h.node} GPU {h.gpu}",
            )
    for h, why in failed:
        job = by_id.get(h.job_id)
        msg = f"its GPU slice cannot be booked ({why}); the GPU is held as foreign"
        if job is not None and job.reason != msg:
            job.reason = msg
            rec.event(session, job, "adopt_failed", msg, {"placement": job.placement, "gres": job.gres})
    ledger.sharing = led


def _start_allocator(session: Session, spec: ClusterSpec) -> CellAllocator:
    """The previous cycle's allocator without its foreign GPUs and bad marks, or a fresh one."""
    snap = session.get(CellSnapshot, 1)
    if snap is None or not snap.data:
        return CellAllocator(spec)
    try:
        alloc = CellAllocator.restore(spec, snap.data)
    except Exception:  # noqa: BLE001 - an old or damaged snapshot (config changed …): adopt everything anew
        return CellAllocator(spec)
    for tag in list(alloc.foreign()):
        alloc.release_foreign(tag)
    for node in alloc.bad_nodes():
        alloc.set_node_healthy(node)
    return alloc


def _occupy(alloc: CellAllocator, tag: str, placement: dict[str, list[int]]) -> None:
    for node, idx in placement.items():
        try:
            alloc.occupy_foreign(f"{tag}@{node}", node, sorted(idx))
        except Exception:  # noqa: BLE001 - unknown node/GPU in the cell config: nothing to occupy
            continue
