"""A requeued job waits until its old GPU indices are free somewhere, as the controller makes it wait.

A job the controller placed carries a typed gres (``gpu:g3:1,…``) that Slurm 22.05 cannot re-type
(it would grant the old and the new GPUs together; docs/controller.md), so the controller starts it
again only on nodes where the same indices are free for its VC (``hivebatch.cells.resume``). With
``SimNotice.keeps_indices`` the simulator holds such a job out of the rounds until that is true, and
then lets the round place it like any other job.

Only the timing follows the rule: the round may bind the job to other GPUs. Binding its old indices
too (adopting them in the cell core before the round, as the controller does) was tried against two
lab replays: it bound cells differently from the controller afterwards and moved another VC's
reservation (docs/simulate.md, "Job by job").

With ``SimNotice.untyped_pins`` (the controller's ``untyped_gres``) a job whose first placement took
exactly the GPUs free on each of its nodes, with no victim leaving there, was pinned as a plain count
(``hivebatch.controller.decide.untyped``); requeued, it is held back only until as many nodes as it
had have at least its count free, all of them free for its VC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hivebatch.cells import GpuUse
from hivebatch.cells.resume import free_for, resume_nodes, symmetric_indices, take

if TYPE_CHECKING:
    from hivebatch.scheduler import Outcome
    from hivebatch.sim.engine import JobRecord, Simulation

FreeMap = dict[str, set[int]]


def keeps_indices(sim: Simulation) -> bool:
    return sim.mode == "cells" and sim.notice is not None and sim.notice.keeps_indices


def _pins_untyped(sim: Simulation) -> bool:
    return keeps_indices(sim) and sim.notice is not None and sim.notice.untyped_pins


def free_gpus(sim: Simulation) -> FreeMap | None:
    """Each node's free GPUs before a round (what Slurm would see free), when untyped pins are modelled."""
    if not _pins_untyped(sim):
        return None
    return {n: _free(g) for n, g in sim.alloc.gpu_map().items() if n not in sim.bad_now}


def _free(gpus: Mapping[int, GpuUse]) -> set[int]:
    return {i for i, u in gpus.items() if u.job is None and not u.foreign and not u.bad}


def note_pins(sim: Simulation, outcomes: Sequence[Outcome], free_before: FreeMap | None) -> None:
    """Mark each job placed for the first time in this round as pinned untyped or typed."""
    if free_before is None:
        return
    leaving = {n for o in outcomes for v in o.preempted for n in sim.records[v].placement}
    after: dict[str, dict[int, GpuUse]] = {}  # the map after the round, made only when needed
    for o in outcomes:
        rec = sim.records[str(o.task.job_id)]
        if o.result != "placed" or rec.untyped is not None or not o.placement:
            continue
        counts = {len(g) for g in o.placement.values()}
        rec.untyped = len(counts) == 1 and all(
            n not in leaving and free_before.get(n) == set(g) for n, g in o.placement.items()
        )
        if not rec.untyped and counts == {1}:
            if not after:
                after.update(sim.alloc.gpu_map())
            prio = sim.priority_of(o.task)
            rec.untyped = _sibling_held(sim, rec.job.vc, prio, o.placement, free_before, after, leaving)


def _sibling_held(
    sim: Simulation,
    vc: str,
    prio: int,
    placement: Mapping[str, Sequence[int]],
    before: FreeMap,
    after: dict[str, dict[int, GpuUse]],
    leaving: set[str],
) -> bool:
    """The controller's ``hold_whole_cell``: one GPU per node, where the free GPUs were exactly its
    smallest cell, whose other GPUs no job of the round took; they are held until the job starts."""
    cells = {node: sim.alloc.sibling_cell(node, idx[0]) for node, idx in placement.items()}
    for node, idx in placement.items():
        rest = sorted(cells[node] - set(idx))
        if node in leaving or len(cells[node]) < 2 or before.get(node) != cells[node]:
            return False
        if not free_for(after.get(node, {}), rest, vc, prio):
            return False
    take(after, {node: sorted(cell) for node, cell in cells.items()}, vc, "held", opportunistic=prio < 0)
    return True


def remember(sim: Simulation, rec: JobRecord) -> None:
    """Called as ``rec`` is preempted, before its placement is cleared."""
    # the controller never starts a typed placement with other indices on each node (Slurm's gres is
    # per node); one the simulator made that way has no indices to keep
    if keeps_indices(sim) and rec.placement and (rec.untyped or symmetric_indices(rec.placement) is not None):
        rec.locked = {n: sorted(g) for n, g in rec.placement.items()}


def _count_room(gmap: Mapping[str, Mapping[int, GpuUse]], sim: Simulation, rec: JobRecord, prio: int) -> bool:
    """Do enough nodes have at least the job's count free, every free GPU there free for its VC?"""
    assert rec.locked is not None
    per_node = len(next(iter(rec.locked.values())))
    fits = 0
    for node, gpus in gmap.items():
        free = sorted(_free(gpus))
        if node not in sim.bad_now and len(free) >= per_node and free_for(gpus, free, rec.job.vc, prio):
            fits += 1
    return fits >= len(rec.locked)


def held_back(sim: Simulation) -> tuple[set[str], set[str]]:
    """The waiting jobs whose indices are free on too few nodes now, and the VCs of those that may
    start again (their round must run even if nothing of theirs changed: another VC freed the GPUs)."""
    if not keeps_indices(sim):
        return set(), set()
    locked = [(jid, r) for jid, r in sim.waiting.items() if r.locked]
    if not locked:
        return set(), set()
    gmap = sim.alloc.gpu_map()
    held: set[str] = set()
    ready: set[str] = set()
    for jid, r in locked:
        assert r.locked is not None
        prio = sim.priority_of(r.task)
        if r.untyped:
            fits = _count_room(gmap, sim, r, prio)
        else:
            idx = symmetric_indices(r.locked) or []
            where = resume_nodes(gmap, list(r.locked), idx, r.job.vc, prio, lambda n: n not in sim.bad_now)
            fits = where is not None
        if not fits:
            held.add(jid)
        else:
            ready.add(r.job.vc)
    return held, ready
