"""Step 7: a rough predicted start for waiting jobs — when enough of their pool's GPUs free up, in
queue order. Shape and fragmentation are ignored; a job whose length nobody knows blocks the
estimate behind it. A pool is a VC, or every GPU outside the VCs' cells for opportunistic work."""

from __future__ import annotations

import datetime as dt
import heapq
import math

from hivebatch.controller.decide.times import after, epoch, from_epoch
from hivebatch.controller.decide.types import Round, Wait
from hivebatch.db.models import Job
from hivebatch.sharing.ledger import SharingLedger

OPPORTUNISTIC_POOL = "*opportunistic"
Releases = dict[str, list[tuple[float, int]]]  # pool -> heap of (time s, GPUs freed then)


def _pool(priority: int, vc: str | None) -> str:
    return OPPORTUNISTIC_POOL if priority < 0 else (vc or "")


def _end_of_running(job: Job, now: dt.datetime) -> float | None:
    if job.notice_until is not None:  # told to leave: gone by then at the latest
        return max(epoch(job.notice_until), epoch(now))
    if job.predicted_end is not None:
        return max(epoch(job.predicted_end), epoch(now))
    limit = (job.request or {}).get("time_limit_s")
    if limit and job.start_time is not None:
        return epoch(job.start_time) + float(limit)
    return None


def _releases(r: Round) -> tuple[Releases, dict[str, int]]:
    """When the GPUs held now, and those placed this round, come free; and GPUs in use per pool."""
    release: Releases = {}
    used: dict[str, int] = {}
    running = {
        j.slurm_job_id: j
        for j in r.ledger.jobs.values()
        if j.state in ("placed", "running") and not j.foreign
    }
    placed_end = {p.job.slurm_job_id: p.predicted_end for p in r.out.places}
    led = r.ledger.sharing
    cell_end = shared_gpu_ends(led, running, placed_end, r.now) if led is not None else {}
    for state in r.alloc.jobs().values():
        job = running.get(int(state.job_id)) if str(state.job_id).isdigit() else None
        pool = _pool(state.priority, state.vc)
        known = _end_of_running(job, r.now) if job is not None else None
        if job is not None and job.slurm_job_id in r.out.notices:  # told to leave in this very round
            known = epoch(r.out.notices[job.slurm_job_id][1])
        end = known if known is not None else cell_end.get(str(state.job_id), math.inf)
        release.setdefault(pool, []).append((end, int(state.gpus)))
        used[pool] = used.get(pool, 0) + int(state.gpus)
    for p in r.out.places:
        if p.placement and not (p.gres or "").startswith("shard:"):  # a slice's GPU is its shared cell's
            end = epoch(p.predicted_end) if p.predicted_end else math.inf
            release.setdefault(_pool(p.job.priority, p.job.vc_name), []).append(
                (end, sum(len(v) for v in p.placement.values()))
            )
    for heap in release.values():
        heapq.heapify(heap)
    return release, used


def estimate_starts(r: Round) -> None:
    release, used = _releases(r)
    # GPUs of nodes that take no new work (drained, down) start nothing: with every node drained for
    # maintenance, hq said START "now" for every waiting job
    healthy = sum(1 for gpus in r.gmap.values() for use in gpus.values() if not use.bad)
    guaranteed_used = sum(v for k, v in used.items() if k != OPPORTUNISTIC_POOL)
    free: dict[str, float] = {}
    clock: dict[str, float] = {}
    # a VC's reserved head starts first (its reservation holds the GPUs it waits for), so it takes the
    # first GPUs that free up in the walk too; the others keep the order they were decided in
    waits = sorted(r.out.waits, key=lambda w: (w.reserved_start is None, w.reserved_start or r.now))
    for w in waits:
        if w.rejected or w.not_startable:
            continue
        pool = _pool(w.job.priority, w.job.vc_name)
        if pool not in free:
            cap = (
                healthy - guaranteed_used
                if pool == OPPORTUNISTIC_POOL
                else min(r.ctx.spec.vc_gpus(pool), healthy)
            )
            free[pool] = cap - used.get(pool, 0)
            clock[pool] = epoch(r.now)
        try:
            _predict(w, release.setdefault(pool, []), free, clock, pool)
        except (OverflowError, ValueError):  # numbers past any date: this job gets no prediction
            w.predicted_start = w.predicted_end = None
        if w.reserved_start is not None:  # the cells' own walk beats this GPU count
            w.predicted_start = w.reserved_start
            w.predicted_end = after(w.reserved_start, w.latency_s)


def _predict(
    w: Wait, heap: list[tuple[float, int]], free: dict[str, float], clock: dict[str, float], pool: str
) -> None:
    """Walk the pool's releases until ``w`` fits; it then holds its GPUs for its latency (unknown: forever)."""
    need = w.job.gpus or 0
    t = clock[pool]
    while free[pool] < need and heap:
        end, n = heapq.heappop(heap)
        t = max(t, end)
        free[pool] += n
    if free[pool] < need or not math.isfinite(t):
        clock[pool] = math.inf
        return
    clock[pool] = t
    if w.not_before is not None:  # its GPUs may be free before the CPUs or memory beside them
        t = max(t, epoch(w.not_before))
    w.predicted_start = from_epoch(t)
    if w.latency_s is not None:
        w.predicted_end = from_epoch(t + w.latency_s)
        heapq.heappush(heap, (t + w.latency_s, need))
    else:
        heapq.heappush(heap, (math.inf, need))
    free[pool] -= need


def shared_gpu_ends(
    led: SharingLedger, running: dict[int, Job], placed_end: dict[int, dt.datetime | None], now: dt.datetime
) -> dict[str, float]:
    """When each shared GPU cell of the cell core frees up: when the last slice on it ends."""
    out: dict[str, float] = {}
    for g in led.gpus().values():
        if not g.slices or not str(g.holder).startswith("share"):
            continue
        end = epoch(now)
        for sid in g.slices:
            jid = int(sid) if sid.isdigit() else -1
            job = running.get(jid)
            t = placed_end.get(jid) if jid in placed_end else (job.predicted_end if job is not None else None)
            if t is None:
                end = math.inf
                break
            end = max(end, epoch(t))
        out[g.holder] = end
    return out
