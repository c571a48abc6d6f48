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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hivebatch.cells.resume import resume_nodes, symmetric_indices

if TYPE_CHECKING:
    from hivebatch.sim.engine import JobRecord, Simulation


def keeps_indices(sim: Simulation) -> bool:
    return sim.mode == "cells" and sim.notice is not None and sim.notice.keeps_indices


def remember(sim: Simulation, rec: JobRecord) -> None:
    """Called as ``rec`` is preempted, before its placement is cleared."""
    # the controller never starts a placement with other indices on each node (Slurm's gres is per
    # node); one the simulator made that way has no indices to keep
    if keeps_indices(sim) and rec.placement and symmetric_indices(rec.placement) is not None:
        rec.locked = {n: sorted(g) for n, g in rec.placement.items()}


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
        idx = symmetric_indices(r.locked) or []
        prio = sim.priority_of(r.task)
        where = resume_nodes(gmap, list(r.locked), idx, r.job.vc, prio, lambda n: n not in sim.bad_now)
        if where is None:
            held.add(jid)
        else:
            ready.add(r.job.vc)
    return held, ready
