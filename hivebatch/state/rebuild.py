"""The cell allocator as readers see it: the controller's last snapshot, or rebuilt from Slurm.

``hq vc`` and ``hsub --test-only`` never write anything; when the controller has not recorded a
snapshot yet they rebuild the allocator from what Slurm runs (hsub jobs adopted at their GPUs, other
GPU work counted as foreign, DOWN/DRAIN nodes bad).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from hivebatch.request import JobRequest, request_of

_ALIVE = ("RUNNING", "COMPLETING", "SUSPENDED", "PENDING", "CONFIGURING")


def rebuild_from_slurm(spec: Any, jobs: list[Any], nodes: list[Any]) -> Any:
    from hivebatch.cells import CellAllocator

    alloc = CellAllocator(spec)
    known = {n.name for n in spec.nodes}
    running = [j for j in jobs if str(j.state).upper() in ("RUNNING", "COMPLETING", "SUSPENDED") and j.gpus]
    ours: list[tuple[Any, JobRequest]] = []
    others: list[Any] = []
    for j in running:
        req = request_of(j)
        (ours.append((j, req)) if req is not None else others.append(j))
    ours.sort(key=lambda pair: -pair[1].priority)  # guaranteed work is counted first
    for j, req in ours:
        placement = {n: sorted(g) for n, g in j.gpus.items() if n in known}
        decision = alloc.adopt(str(j.job_id), req.vc, req.priority, placement)
        if decision.result != "placed":
            others.append(j)
    for j in others:
        for node, idx in j.gpus.items():
            if node in known and idx:
                try:
                    alloc.occupy_foreign(f"slurm:{j.job_id}@{node}", node, sorted(idx))
                except Exception:  # noqa: BLE001 - GPUs the cell config does not know: nothing to count
                    continue
    for n in nodes:
        if n.name in known and n.bad:
            alloc.set_node_bad(n.name)
    return alloc


def prune_finished(alloc: Any, slurm_jobs: list[Any]) -> None:
    """Release snapshot jobs that Slurm no longer runs or holds placed (they ended after the snapshot)."""
    from hivebatch.sharing import is_synthetic

    alive = {str(j.job_id) for j in slurm_jobs if str(j.state).upper() in _ALIVE}
    for job_id in list(alloc.jobs()):
        # a GPU shared by slices is held by a synthetic cell ("share:node2:3"), not by a Slurm job
        if job_id not in alive and not is_synthetic(job_id):
            with contextlib.suppress(Exception):
                alloc.release(job_id)


def reader_allocator(
    spec: Any, snapshot: dict[str, Any] | None, taken_at: dt.datetime | None = None
) -> tuple[Any, str]:
    """(allocator, where it came from) — the controller's last snapshot (minus jobs that ended since), else
    rebuilt from what Slurm runs."""
    from hivebatch.cells import CellAllocator
    from hivebatch.slurm import get_backend

    be = get_backend()
    jobs = be.list_jobs()
    if snapshot:
        try:
            alloc = CellAllocator.restore(spec, snapshot)
        except Exception:  # noqa: BLE001 - a snapshot of another config: rebuild instead
            alloc = None
        if alloc is not None:
            prune_finished(alloc, jobs)
            when = (
                f" at {taken_at.replace(tzinfo=dt.UTC).astimezone():%H:%M:%S}" if taken_at is not None else ""
            )
            return alloc, f"the controller's last cycle{when}"
    return rebuild_from_slurm(
        spec, jobs, be.list_nodes()
    ), "Slurm (the controller has not recorded cells yet)"
