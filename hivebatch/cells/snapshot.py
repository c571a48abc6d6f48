"""The allocator's state as plain data, and back: bindings, jobs, bad nodes and outside work.

A restore re-takes exactly the same physical cells, so the VC views are the same as before;
whatever the current config can no longer hold (a node, type or VC gone) is left out and the
caller reconciles it with what Slurm says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hivebatch.cells import views
from hivebatch.cells.binding import bind_exactly, unbind
from hivebatch.cells.tree import Cell
from hivebatch.errors import HivebatchError

if TYPE_CHECKING:
    from hivebatch.cells.allocator import CellAllocator

SNAPSHOT_VERSION = 1


def snapshot(alloc: CellAllocator) -> dict[str, Any]:
    return {
        "version": SNAPSHOT_VERSION,
        "bad_nodes": views.bad_nodes(alloc),
        "foreign": views.foreign(alloc),
        "bindings": views.bindings(alloc),
        "jobs": [
            {"job_id": s.job_id, "vc": s.vc, "priority": s.priority, "placement": s.placement}
            for s in (j.state() for j in alloc.placed.values())
        ],
    }


def check_version(snap: object) -> None:
    if not isinstance(snap, dict) or snap.get("version") != SNAPSHOT_VERSION:
        version = snap.get("version") if isinstance(snap, dict) else "?"
        raise HivebatchError(f"cannot restore a cell snapshot of version {version}")


def restore_into(alloc: CellAllocator, snap: dict[str, Any]) -> None:
    """Replay a snapshot on a fresh allocator."""
    for b in snap.get("bindings", []):
        _restore_binding(alloc, b)
    for j in snap.get("jobs", []):
        # a job the current config cannot hold comes back "rejected" and is left out; the
        # caller reconciles it with what Slurm says
        alloc.adopt(
            str(j["job_id"]),
            str(j["vc"]),
            int(j["priority"]),
            {k: list(x) for k, x in j["placement"].items()},
        )
    # bindings without a job (should not exist) are given back
    for v in alloc.vcs.values():
        for lst in v.bound.values():
            for lvl in lst:
                for cell in list(lvl.values()):
                    if cell.n_g == 0:
                        unbind(alloc, cell)
    for node in snap.get("bad_nodes", []):
        if node in alloc.tree.node_cell:
            alloc.set_node_bad(node)
    for tag, where in snap.get("foreign", {}).items():
        for node, idx in where.items():
            if node in alloc.tree.node_cell:
                alloc.occupy_foreign(tag, node, idx)


def _restore_binding(alloc: CellAllocator, b: Any) -> None:
    """Re-take exactly the same physical cell; a binding the current config cannot hold is skipped."""
    try:
        first_node = next(iter(b["gpus"]))
        leaf: Cell | None = alloc.tree.leaf.get((first_node, int(b["gpus"][first_node][0])))
        ct = alloc.spec.cell_types.get(b["type"])
        v = alloc.vcs.get(b["vc"])
    except (KeyError, TypeError, ValueError, StopIteration, IndexError):
        return
    if leaf is None or ct is None or v is None or ct.chain != leaf.chain:
        return
    cell: Cell | None = leaf
    while cell is not None and cell.level < ct.level:
        cell = cell.parent
    if cell is not None:
        bind_exactly(alloc, cell, b["vc"])
