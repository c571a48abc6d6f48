"""Step 2: make the DB ledger agree with what Slurm says, then rebuild the cell allocator from it.

The ledger (checked against Slurm) is the truth about which job holds which GPUs; the allocator is
made to agree with it every cycle. It starts from the previous cycle's snapshot (so VC cells stay
bound to the same physical cells and packing decisions survive), then: jobs the ledger no longer
lists as holding GPUs are released, jobs it lists that the snapshot lacks (or holds elsewhere) are
``adopt``-ed at their real placement, foreign GPUs and bad nodes are set afresh from this cycle's
observation. A missing or unreadable snapshot just means adopting everything — so a stale or lost
snapshot can never make the controller hand out GPUs twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hivebatch.controller.observe import Observation, phase, to_utc
from hivebatch.controller.record import Recorder, account_run, get_state, placement_text, set_state
from hivebatch.db.models import FINAL_STATES, Job
from hivebatch.request import JobRequest


@dataclass
class Ledger:
    """The cycle's working set: ledger rows of unfinished jobs, their Slurm records, the rebuilt allocator."""

    jobs: dict[int, Job]
    slurm: dict[int, Any]
    alloc: Any = None
    redo_place: list[Job] = field(default_factory=list)  # intent "place", Slurm job still held: act again
    redo_preempt: list[Job] = field(default_factory=list)  # intent "preempt", Slurm job still running
    bad_nodes: set[str] = field(default_factory=set)
    sharing: Any = None  # hivebatch.sharing.SharingLedger: GPU slices booked on top of ``alloc``


def is_slice_job(job: Job) -> bool:
    """A job granted a slice of one GPU (``shard:gN:k``, one GPU asked): the sharing ledger books it,
    not the cells. A whole-GPU job holding its GPU on each of its nodes as shards asked for more GPUs:
    the cells hold it like any whole-GPU job."""
    from hivebatch.sharing.integration import is_slice_row

    return is_slice_row(job)


def _shard_placement(sj: Any) -> tuple[dict[str, list[int]] | None, str | None]:
    """Where a running shard job is, from Slurm alone: ({node: [gpu], …}, "shard:gN:k") — one GPU per
    node with the same index and shard count on every node (Slurm's gres is per node)."""
    held = [(n, g, c) for n, per in (getattr(sj, "shards", None) or {}).items() for g, c in per.items() if c]
    nodes = {n for n, _g, _c in held}
    if not held or len(nodes) != len(held) or len({(g, c) for _n, g, c in held}) != 1:
        return None, None
    _node, gpu, count = held[0]
    return {n: [int(gpu)] for n in sorted(nodes)}, f"shard:g{int(gpu)}:{int(count)}"


def _gpus(sj: Any) -> dict[str, list[int]]:
    return {node: sorted(int(i) for i in idx) for node, idx in (sj.gpus or {}).items() if idx}


def _request_dict(req: JobRequest) -> dict[str, Any]:
    return {k: v for k, v in asdict(req).items() if v is not None}


def _finish(session: Session, rec: Recorder, job: Job, state: str, sj: Any | None, why: str) -> None:
    """Close a job: book its last run, set the final state, one event."""
    end = to_utc(getattr(sj, "end_time", None)) if sj is not None else None
    end = end or rec.now
    if state == "preempted":
        # Slurm preempted it itself (PreemptMode=REQUEUE shows PREEMPTED briefly); it will come back pending
        account_run(session, job, end, preempted=True)
        job.state = "preempted"
        job.preemptions = (job.preemptions or 0) + 1
        job.intent = None
        rec.event(session, job, "preempted", why)
        return
    account_run(session, job, end)
    job.state = state
    job.intent = None
    job.end_time = end
    if sj is not None and getattr(sj, "exit_code", None):
        job.exit_code = str(sj.exit_code)
    if state == "done" and job.expected_completion is not None:
        job.meets_qos = end <= job.expected_completion
    job.reason = None if state == "done" else why
    rec.event(session, job, "finished", f"{state}: {why}", {"state": state, "exit_code": job.exit_code})


def _start(session: Session, rec: Recorder, job: Job, sj: Any) -> None:
    start = to_utc(sj.start_time) or rec.now
    actual = _gpus(sj)
    if job.start_time is None:
        job.start_time = start
    job.segment_start = start
    job.state = "running"
    job.reason = None
    if actual and job.placement and actual != job.placement:
        rec.event(
            session,
            job,
            "placement_mismatch",
            f"Slurm runs it on {placement_text(actual)}, not on the granted {placement_text(job.placement)}",
            {"granted": job.placement, "actual": actual},
        )
    if actual:
        job.placement = actual
    rec.event(
        session, job, "started", f"running on {placement_text(job.placement)}", {"placement": job.placement}
    )


def _new_job(sj: Any, req: JobRequest | None, now: dt.datetime) -> Job:
    job = Job(
        slurm_job_id=int(sj.job_id),
        name=sj.name,
        user=sj.user,
        account=sj.account,
        state="queued",
        submit_time=to_utc(sj.submit_time) or now,
        created_at=now,
        updated_at=now,
        preemptions=0,
        gpu_hours_guaranteed=0.0,
        gpu_hours_opportunistic=0.0,
        gpu_hours_lost=0.0,
    )
    if req is None:
        job.foreign = True
        job.vc_name = sj.account or None
        job.qos = sj.qos or None
        job.priority = 0
        job.gpus = sum(len(v) for v in _gpus(sj).values())
    else:
        job.foreign = False
        job.vc_name = req.vc
        job.qos = req.qos
        job.priority = req.priority
        job.request = _request_dict(req)
        job.gpus = req.gpus
        job.gpu_type = req.gpu_type
    return job


def _known_final(session: Session, ids: list[int]) -> set[int]:
    out: set[int] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        out.update(session.scalars(select(Job.slurm_job_id).where(Job.slurm_job_id.in_(chunk))))
    return out


def sync_jobs(session: Session, obs: Observation, rec: Recorder, backend: Any) -> Ledger:
    """Bring every unfinished ledger row up to date with Slurm, add the jobs Slurm has that the ledger lacks."""
    rows = session.scalars(select(Job).where(Job.state.notin_(FINAL_STATES))).all()
    jobs = {j.slurm_job_id: j for j in rows}
    ledger = Ledger(jobs=jobs, slurm=obs.jobs)

    # Slurm jobs the ledger does not know yet
    unknown = [jid for jid in obs.jobs if jid not in jobs]
    already_final = _known_final(session, unknown) if unknown else set()
    new_rows: list[Job] = []
    for jid in unknown:
        if jid in already_final:
            continue
        sj = obs.jobs[jid]
        req = JobRequest.from_comment(sj.comment)
        ph = phase(sj.state)
        if req is None and not (ph == "running" and _gpus(sj)):
            continue  # not hivebatch's and not using GPUs: none of our business
        if req is not None and ph not in ("pending", "running"):
            continue  # an hsub job that came and went between two cycles; accounting has it
        job = _new_job(sj, req, obs.now)
        new_rows.append(job)
    if new_rows:
        session.add_all(new_rows)
        session.flush()
    for job in new_rows:
        sj = obs.jobs[job.slurm_job_id]
        jobs[job.slurm_job_id] = job
        if job.foreign:
            job.placement = _gpus(sj)
            job.state = "running"
            job.start_time = job.segment_start = to_utc(sj.start_time) or obs.now
            rec.event(
                session,
                job,
                "foreign",
                f"not submitted through hsub but uses GPUs {placement_text(job.placement)}; they count as occupied",
                {"placement": job.placement, "user": sj.user, "account": sj.account},
            )
        elif phase(sj.state) == "running":
            # started without a ledger entry (ledger lost or rebuilt): adopt it where Slurm runs it
            rec.event(
                session,
                job,
                "submitted",
                f"{sj.user} asked for {job.gpus} GPU(s) in VC {job.vc_name} ({job.qos})",
            )
            job.placement = _gpus(sj) or None
            if not job.placement:
                job.placement, job.gres = _shard_placement(sj)
            _start(session, rec, job, sj)
        else:
            rec.event(
                session,
                job,
                "submitted",
                f"{sj.user} asked for {job.gpus} GPU(s) in VC {job.vc_name} ({job.qos})",
                {"request": job.request},
            )

    # ledger rows: follow Slurm
    missing: list[Job] = []
    for jid, job in list(jobs.items()):
        sj = obs.jobs.get(jid)
        if sj is None:
            missing.append(job)
            continue
        ph = phase(sj.state)
        if job.foreign:
            if ph == "running":
                actual = _gpus(sj)
                if actual and actual != job.placement:
                    job.placement = actual
                if job.state != "running":
                    job.state = "running"
                    job.segment_start = to_utc(sj.start_time) or obs.now
            elif ph == "pending":
                account_run(session, job, obs.now)
                job.state = "queued"
            else:
                _finish(session, rec, job, ph, sj, f"Slurm state {sj.state}")
            continue
        _follow(session, rec, ledger, job, sj, ph, backend)
    if missing:
        _resolve_missing(session, rec, missing, backend)
    for job in missing:
        jobs.pop(job.slurm_job_id, None)
    for jid in [j for j, row in jobs.items() if row.state in FINAL_STATES]:
        jobs.pop(jid)
    return ledger


def _follow(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: Any, ph: str, backend: Any
) -> None:
    """One hsub job: ledger state × Slurm phase → new ledger state (see the table in the README section)."""
    if job.intent == "place":
        if ph == "pending" and sj.held:
            ledger.redo_place.append(job)  # update/release may not have happened: do it again, same placement
        elif ph == "pending":
            job.intent = None
            job.state = "placed"
            rec.event(
                session,
                job,
                "placed",
                f"released on {placement_text(job.placement)} (confirmed after restart)",
            )
        elif ph == "running":
            job.intent = None
            rec.event(
                session,
                job,
                "placed",
                f"released on {placement_text(job.placement)} (confirmed after restart)",
            )
            _start(session, rec, job, sj)
        else:
            _finish(session, rec, job, ph, sj, f"Slurm state {sj.state}")
        return
    if job.intent == "preempt":
        if ph == "running":
            ledger.redo_preempt.append(job)
        elif ph == "pending":
            account_run(session, job, rec.now, preempted=True)
            job.intent = None
            job.state = "preempted"
            job.preemptions = (job.preemptions or 0) + 1
            rec.event(session, job, "preempted", "requeued and held (confirmed after restart)")
            if not sj.held:
                _hold(session, rec, job, backend)
        else:
            _finish(session, rec, job, ph, sj, f"Slurm state {sj.state}")
        return

    if ph not in ("pending", "running"):
        _finish(
            session, rec, job, ph, sj, f"Slurm state {sj.state}" + (f" ({sj.reason})" if sj.reason else "")
        )
        return
    if job.state in ("queued", "preempted", "rejected"):
        if ph == "running":
            rec.event(
                session, job, "started_unplaced", "Slurm started it although hivebatch had not placed it"
            )
            _start(session, rec, job, sj)
        elif not sj.held:
            # the owner released their own hold: it would run without GPUs chosen by the cells
            rec.event(
                session, job, "held", "released without a placement; held again until hivebatch places it"
            )
            _hold(session, rec, job, backend)
        return
    if job.state == "placed":
        if ph == "running":
            _start(session, rec, job, sj)
        elif sj.held:
            job.state = "queued"
            rec.event(
                session, job, "held", "held again in Slurm after it was placed; its cells are given back"
            )
        return
    if job.state == "running":
        if ph == "running":
            actual = _gpus(sj)
            if actual and actual != job.placement:
                rec.event(
                    session,
                    job,
                    "placement_mismatch",
                    f"Slurm runs it on {placement_text(actual)}, not on {placement_text(job.placement)}",
                    {"granted": job.placement, "actual": actual},
                )
                job.placement = actual
            return
        # running → pending: Slurm requeued it (its own preemption, node failure, an admin)
        account_run(session, job, rec.now, preempted=True)
        job.state = "preempted"
        job.preemptions = (job.preemptions or 0) + 1
        rec.event(
            session,
            job,
            "requeued",
            f"Slurm requeued it ({sj.reason or sj.state}); it waits to be placed again",
        )
        if not sj.held:
            _hold(session, rec, job, backend)


def _hold(session: Session, rec: Recorder, job: Job, backend: Any) -> None:
    from hivebatch.slurm import SlurmError

    try:
        backend.hold(job.slurm_job_id)
    except SlurmError as exc:
        rec.event(session, job, "act_failed", f"hold failed: {exc}")


def _resolve_missing(session: Session, rec: Recorder, missing: list[Job], backend: Any) -> None:
    """Jobs Slurm no longer lists: their final state comes from accounting when it has them."""
    from hivebatch.slurm import SlurmError

    records: dict[int, Any] = {}
    try:
        for r in backend.history([j.slurm_job_id for j in missing]):
            records[int(r.job_id)] = r
    except (SlurmError, NotImplementedError):
        records = {}
    for job in missing:
        r = records.get(job.slurm_job_id)
        if r is not None:
            ph = phase(r.state)
            state = ph if ph not in ("pending", "running") else "failed"
            _finish(session, rec, job, state, r, f"Slurm accounting says {r.state}")
        else:
            _finish(session, rec, job, "failed", None, "no longer known to Slurm and not in its accounting")


def rebuild_allocator(
    session: Session,
    rec: Recorder,
    ledger: Ledger,
    obs: Observation,
    spec: Any,
    data: dict[str, Any] | None = None,
) -> Any:
    """A fresh CellAllocator holding exactly the GPUs granted, running, foreign or bad right now, and
    the sharing ledger of GPU slices on top of it (``ledger.sharing``; ``data`` = the config)."""
    alloc = _start_allocator(session, spec)
    holders = [
        j
        for j in ledger.jobs.values()
        if not j.foreign
        and not is_slice_job(j)  # slices are booked by the sharing ledger below, never as whole GPUs
        and j.placement
        and (j.intent == "place" or (j.state in ("placed", "running") and j.intent != "preempt"))
    ]
    # guaranteed work first: if the cells cannot hold everything, opportunistic work is what spills over
    holders.sort(key=lambda j: (-j.priority, j.placed_at or j.submit_time or rec.now, j.slurm_job_id))
    wanted = {str(j.slurm_job_id): {n: sorted(v) for n, v in j.placement.items()} for j in holders}
    for jid, state in list(alloc.jobs().items()):
        have = {n: sorted(v) for n, v in state.placement.items()}
        if wanted.get(jid) != have:
            alloc.release(jid)
    kept = set(alloc.jobs())
    used: dict[str, set[int]] = {}
    in_cells: list[Job] = []  # whole-GPU jobs the cells hold (those holding shards may carry slices)
    for job in holders:
        placement = wanted[str(job.slurm_job_id)]
        if str(job.slurm_job_id) in kept:
            in_cells.append(job)
            for n, v in placement.items():
                used.setdefault(n, set()).update(v)
            continue
        decision = alloc.adopt(str(job.slurm_job_id), job.vc_name, job.priority, placement)
        if decision.result != "placed":
            why = decision.reason or decision.error or "its GPUs conflict with other work"
            msg = f"cannot be counted in VC {job.vc_name}'s cells ({why}); its GPUs are held as foreign"
            if job.reason != msg:
                job.reason = msg
                rec.event(session, job, "adopt_failed", msg, {"placement": placement})
            _occupy(alloc, f"slurm:{job.slurm_job_id}", placement)
        else:
            in_cells.append(job)
        for n, v in placement.items():
            used.setdefault(n, set()).update(v)
    _rebuild_sharing(session, rec, ledger, alloc, spec, data or {}, used, in_cells)
    for job in ledger.jobs.values():
        if job.foreign and job.state == "running" and job.placement:
            _occupy(alloc, f"slurm:{job.slurm_job_id}", job.placement)
            for n, v in job.placement.items():
                used.setdefault(n, set()).update(v)
    # GPUs busy with jobs hivebatch cannot see at all (e.g. another cluster's reservation)
    for name, node in obs.nodes.items():
        busy = set(int(i) for i in (node.gpus_used or [])) | set(
            int(i) for i in (getattr(node, "gpus_shared", None) or [])
        )
        stray = sorted(busy - used.get(name, set()))
        if stray:
            _occupy(alloc, f"node:{name}", {name: stray})
    spec_nodes = [n.name for n in spec.nodes]
    bad = {n for n in spec_nodes if n not in obs.nodes or obs.nodes[n].bad}
    for name in sorted(bad):
        alloc.set_node_bad(name)
    previous = set(get_state(session, "bad_nodes") or [])
    for name in sorted(bad - previous):
        node = obs.nodes.get(name)
        what = f"Slurm state {node.state}" if node is not None else "not known to Slurm"
        rec.event(
            session, None, "node_bad", f"node {name} is bad ({what}): no new work goes there", {"node": name}
        )
    for name in sorted(previous - bad):
        rec.event(session, None, "node_healthy", f"node {name} is healthy again", {"node": name})
    set_state(session, "bad_nodes", sorted(bad), rec.now)
    ledger.bad_nodes = bad
    ledger.alloc = alloc
    return alloc


def _rebuild_sharing(
    session: Session,
    rec: Recorder,
    ledger: Ledger,
    alloc: Any,
    spec: Any,
    data: dict[str, Any],
    used: dict[str, set[int]],
    in_cells: list[Job] | None = None,
) -> None:
    """Book the slices the ledger's jobs hold (after the whole-GPU jobs: guaranteed work of the cells
    comes first; whole-GPU jobs in ``in_cells`` that hold shards leave the rest of their GPUs to
    slices). A slice that cannot be booked keeps its GPU as foreign work, never handed out twice."""
    from hivebatch.sharing.integration import controller_ledger, held_slices

    rows = [j for j in ledger.jobs.values() if is_slice_job(j)]
    led, failed = controller_ledger(alloc, spec, data, rows, in_cells or [])
    by_id = {str(j.slurm_job_id): j for j in rows}
    for h in held_slices(rows):
        used.setdefault(h.node, set()).add(h.gpu)
    for h, why in failed:
        job = by_id.get(h.job_id)
        msg = f"its GPU slice cannot be booked ({why}); the GPU is held as foreign"
        if job is not None and job.reason != msg:
            job.reason = msg
            rec.event(session, job, "adopt_failed", msg, {"placement": job.placement, "gres": job.gres})
    ledger.sharing = led


def _start_allocator(session: Session, spec: Any) -> Any:
    """The previous cycle's allocator without its foreign GPUs and bad marks, or a fresh one."""
    from hivebatch.cells import CellAllocator
    from hivebatch.db.models import CellSnapshot

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


def _occupy(alloc: Any, tag: str, placement: dict[str, list[int]]) -> None:
    for node, idx in placement.items():
        try:
            alloc.occupy_foreign(f"{tag}@{node}", node, sorted(idx))
        except Exception:  # noqa: BLE001 - unknown node/GPU in the cell config: nothing to occupy
            continue
