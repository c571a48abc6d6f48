"""Step 4: carry the decisions out through the Slurm backend, intent first.

Before any Slurm call the ledger records the intent (``Job.intent`` = "place" with the placement,
or "preempt"), committed in one transaction. Then each action runs and its result is committed on
its own. A controller killed anywhere in between finds the intents on its next cycle and checks
them against Slurm (reconcile): a still-held job is updated and released again with the *same*
placement, a still-running victim is requeued again — so no job is lost and none is placed twice.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from hivebatch.controller.avoid import avoid_nodes
from hivebatch.controller.decide import Decisions, Place, gres_for, symmetric_indices
from hivebatch.controller.decide.spread import node_share
from hivebatch.controller.decide.types import TakeBack
from hivebatch.controller.notice import send_notice, write_notice
from hivebatch.controller.observe import phase, to_utc
from hivebatch.controller.preemption import book_preemption, preemptor, resume_reason, what_it_leaves
from hivebatch.controller.record import Recorder, placement_text
from hivebatch.db.models import Job
from hivebatch.request import CLASS_PRIORITY, released_by_owner
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import SlurmError, SlurmJob


@dataclass
class ActResult:
    placed: int = 0
    preempted: int = 0
    failed: list[str] = field(
        default_factory=list
    )  # Slurm calls that failed for a reason other than the job ending


def write_intents(
    session: Session,
    decisions: Decisions,
    jobs: dict[int, Job],
    now: dt.datetime,
    slurm: Mapping[int, SlurmJob] | None = None,
) -> None:
    for place in decisions.places:
        job = place.job
        job.intent = "place"
        job.notice_by = None
        job.placement = place.placement or None
        if place.gres:
            job.gres = place.gres
        if place.shape:
            job.shape_nodes, job.shape_gpn = place.shape
            job.gpus = place.shape[0] * place.shape[1]
        job.placed_at = now
        job.predicted_start = now
        job.predicted_end = place.predicted_end
        if place.predicted_end is not None:
            job.latency_s = (place.predicted_end - now).total_seconds()
        job.slack_s = place.slack_s
        if place.ect is not None:
            job.expected_completion = place.ect
        job.reason = place.note  # e.g. which profile stood in for the job's model
        cls = decisions.classes.get(job.slurm_job_id)
        if cls is not None and cls != job.qos:
            # the class it runs in: the owner moved it, or a limit put it lower; rebuild and reports follow
            job.qos, job.priority = cls, CLASS_PRIORITY[cls]
    for victim_id in decisions.victims:
        victim = jobs.get(victim_id)
        if victim is not None:
            victim.intent = "preempt"
    for victim_id, (by, until) in decisions.notices.items():
        victim = jobs.get(victim_id)
        if victim is not None and victim.intent is None:
            write_notice(victim, by, until, what_it_leaves(victim, jobs.get(by)), slurm)


def _look_up(backend: SlurmBackend, job_id: int) -> tuple[bool, SlurmJob | None]:
    """After a failed call: whether Slurm answered, and the job as it lists it now (None: gone)."""
    try:
        found = backend.list_jobs([job_id])
    except SlurmError:
        return False, None
    return True, next((sj for sj in found if int(sj.job_id) == job_id), None)


def _still_in(backend: SlurmBackend, job_id: int, phases: tuple[str, ...]) -> bool | None:
    """After a failed call: whether Slurm has the job in one of ``phases`` now (False when it is gone),
    None unknown."""
    answered, sj = _look_up(backend, job_id)
    if not answered:
        return None
    return sj is not None and phase(sj.state) in phases


def _still_pending(backend: SlurmBackend, job_id: int) -> bool | None:
    """True when Slurm still has the job, waiting or running."""
    return _still_in(backend, job_id, ("pending", "running"))


def _still_waiting(backend: SlurmBackend, job_id: int) -> bool | None:
    """True when the job still waits: False also when it started meanwhile."""
    return _still_in(backend, job_id, ("pending",))


def _hold_or_requeue(backend: SlurmBackend, job: Job) -> bool:
    """Hold a placed victim; one Slurm started since the ledger read it refuses the hold (and is left
    running with priority 0, tests/fixtures/slurm/err_hold_running_managed.txt), so it is requeued held
    now, its run booked from Slurm's start: its preemptor is released in this same cycle. True when it ran."""
    try:
        backend.hold(job.slurm_job_id)
        return False
    except SlurmError:
        _, started = _look_up(backend, job.slurm_job_id)
        if started is None or phase(started.state) != "running":
            raise
    backend.requeue_hold(job.slurm_job_id)
    job.segment_start = to_utc(started.start_time)
    if job.start_time is None:
        job.start_time = job.segment_start
    return True


def _record_failure(
    session: Session,
    rec: Recorder,
    job: Job,
    result: ActResult,
    exc: SlurmError,
    alive: bool | None,
    verb: str,
    noun: str,
    refused: bool = False,
) -> None:
    """Book a failed Slurm call: a job that has ended drops its intent; any other is listed as failed."""
    if alive is False:
        job.intent = None
        rec.event(session, job, "act_failed", f"could not {verb} it, it has already ended: {exc}")
    else:
        result.failed.append(f"{noun} of job {job.slurm_job_id}: {exc}")
        why = f"{noun} refused by Slurm" if refused else f"{noun} failed, will retry next cycle"
        rec.event(session, job, "act_failed", f"{why}: {exc}")
    session.commit()


def preempt(
    session: Session,
    rec: Recorder,
    backend: SlurmBackend,
    job: Job,
    by: int | None,
    result: ActResult,
    taker: Job | None = None,
    slurm: Mapping[int, SlurmJob] | None = None,
) -> None:
    """Requeue-hold a running victim (hold a placed one that has not started) and book its run as lost;
    ``taker``: the ledger's record of job ``by``, which says what the victim leaves for it; ``slurm``: the
    jobs Slurm lists, to name it as squeue shows it."""
    running = job.state == "running"
    try:
        if running:
            backend.requeue_hold(job.slurm_job_id)
        else:
            running = _hold_or_requeue(backend, job)
    except SlurmError as exc:
        alive = _still_pending(backend, job.slurm_job_id)
        _record_failure(session, rec, job, result, exc, alive, "requeue", "requeue")
        return
    who = preemptor(by, slurm)
    book_preemption(
        session,
        rec,
        job,
        rec.now if running else None,
        "preempted",
        # by is None where Slurm preempted it for CPUs or memory (slurm_grace), or for a notice written
        # before its preemptor was kept: what it held is all that is known
        f"requeued and held: {who} needs "
        + (
            what_it_leaves(job, taker)
            if by is not None
            else f"what it holds on {placement_text(job.placement)}"
        ),
        {"by": by, "placement": job.placement},
    )
    job.reason = resume_reason(job, who)
    result.preempted += 1
    session.commit()


def place(
    session: Session,
    rec: Recorder,
    backend: SlurmBackend,
    job: Job,
    result: ActResult,
    redo: bool = False,
    sj: SlurmJob | None = None,
) -> None:
    """Pin a held job to its placement (nodes, node count, typed gres, and its ``node_share``) and
    release it."""
    placement = job.placement or {}
    nodes = sorted(placement)
    try:
        if placement:
            gres = job.gres or gres_for(symmetric_indices(placement) or [])
            share = node_share(placement, sj)
            backend.update_pending(
                job.slurm_job_id,
                nodelist=nodes,
                # NumNodes makes Slurm count an overcommitted job's tasks' CPUs again, and it never runs
                # (BadConstraints); the node list alone holds it to those nodes (overcommit.txt)
                num_nodes=None if sj is not None and sj.overcommitted else len(nodes),
                gres=gres,
                min_cpus_per_node=share.cpus,
                min_mem_per_node_mb=share.mem_mb,
                tasks_per_node=share.tasks,
            )
        if sj is not None and sj.array_job_id and "singleton" in sj.dependency:
            # Slurm judges an array's singleton once and starts its tasks together (singleton_array.txt);
            # a task split off before that keeps it and, released, waits for its own running siblings
            # with its GPUs pinned idle. Placed, it was judged met, which Slurm marks by dropping it.
            backend.clear_dependency(job.slurm_job_id)
        if sj is not None and released_by_owner(sj):
            # a far begin time left on a held job (a plugin from before the controller's hold marker
            # was dropped there, see hadmin slurm-config) would keep Slurm from starting it
            backend.clear_begin_time(job.slurm_job_id)
        backend.release(job.slurm_job_id)
    except SlurmError as exc:
        alive = _still_pending(backend, job.slurm_job_id)
        refused = alive is True and not redo
        if refused:
            # undo the intent: the job waits again; the next cycle decides afresh
            job.intent = None
            job.state = "queued" if job.state != "preempted" else job.state
            job.reason = f"Slurm refused the placement: {exc}"
        _record_failure(session, rec, job, result, exc, alive, "place", "placement", refused)
        return
    job.intent = None
    job.state = "placed"
    if redo:
        job.reason = None
    what = f"on {placement_text(placement)} (gres {job.gres})" if placement else "without GPUs"
    if job.reason:
        what += f"; {job.reason}"
    rec.event(
        session,
        job,
        "placed",
        ("placed again after restart " if redo else "placed ") + what,
        {"placement": placement, "gres": job.gres, "shape": [job.shape_nodes, job.shape_gpn], "redo": redo},
    )
    result.placed += 1
    session.commit()


def act(
    session_factory: sessionmaker[Session] | None,
    session: Session,
    rec: Recorder,
    backend: SlurmBackend,
    decisions: Decisions,
    jobs: dict[int, Job],
    redo_preempt: list[Job],
    redo_place: list[Job],
    redo_notice: list[Job] | None = None,
    slurm: dict[int, SlurmJob] | None = None,
) -> ActResult:
    """Notices and victims first (their GPUs must be free before the new job is released), then placements."""
    result = ActResult()
    slurm = slurm or {}
    for job in redo_notice or []:
        send_notice(session, rec, backend, job, slurm.get(job.slurm_job_id), result.failed)
    for victim_id in decisions.notices:
        victim = jobs.get(victim_id)
        if victim is not None and victim.intent == "notice":
            send_notice(session, rec, backend, victim, slurm.get(victim_id), result.failed)
    for job in redo_preempt:
        # its notice ended: it leaves for that job
        by = job.notice_by
        preempt(session, rec, backend, job, by, result, jobs.get(by) if by is not None else None, slurm)
    for victim_id, by in decisions.victims.items():
        victim = jobs.get(victim_id)
        if victim is not None and victim.intent == "preempt":
            preempt(session, rec, backend, victim, by, result, jobs.get(by), slurm)
    for job in redo_place:
        place(session, rec, backend, job, result, redo=True, sj=slurm.get(job.slurm_job_id))
    for tb in decisions.take_backs:
        take_back(session, rec, backend, tb, result)
    for job, why in decisions.past_deadline:
        end_past_deadline(session, rec, backend, job, why, result)
    for job, why in decisions.doomed:
        end_doomed(session, rec, backend, job, why, result)
    for p in decisions.places:
        if p.job.intent == "place":
            place(session, rec, backend, p.job, result, sj=slurm.get(p.job.slurm_job_id))
    split_arrays(backend, decisions.splits, result)
    return result


def take_back(
    session: Session, rec: Recorder, backend: SlurmBackend, tb: TakeBack, result: ActResult
) -> None:
    """Hold a placed job Slurm did not start; it waits to be placed again (away from those nodes when
    ``tb.avoid``)."""
    job = tb.job
    try:
        backend.hold(job.slurm_job_id)
    except SlurmError as exc:
        # Slurm started it between the cycle's read and the hold ("Job is no longer pending
        # execution"; the hold's priority 0 stays on the running job: err_hold_running_managed.txt)
        if _still_waiting(backend, job.slurm_job_id) is not False:
            result.failed.append(f"take-back of job {job.slurm_job_id}: {exc}")
        return  # started or ended meanwhile: the next cycle follows it from there
    if tb.avoid:
        avoid_nodes(session, job.slurm_job_id, sorted(job.placement or {}), rec.now)
    job.state = "queued"
    then = tb.then or ("placed again on other nodes" if tb.avoid else "placed again where it fits")
    job.reason = f"{tb.why}; {then}"
    rec.event(session, job, "taken_back", job.reason, {"placement": job.placement})
    session.commit()


def end_past_deadline(
    session: Session,
    rec: Recorder,
    backend: SlurmBackend,
    job: Job,
    why: str,
    result: ActResult,
) -> None:
    """Release a job that can no longer meet its --deadline: Slurm's scheduler ends it as DEADLINE at its
    next pass, as it ends a late job of its own (it holds no cells and no placement meanwhile)."""
    # after the release: the job_submit plugin parks an unpinned job an Operator releases behind a
    # far begin time, and a requeued job has its short delay (cred_expire + 1 s: 121 s at Slurm's
    # default); Slurm tests the deadline only of jobs it may start now
    _release_to_end(session, rec, backend, job, why, result, "past_deadline", clear_begin=True)


def end_doomed(
    session: Session, rec: Recorder, backend: SlurmBackend, job: Job, why: str, result: ActResult
) -> None:
    """Release a job whose dependency can never be met and that asked to be cancelled then: Slurm
    cancels it at its next pass, as it does a job of its own, instead of at its re-test of held jobs a
    minute later. The plugin's far begin time stays: Slurm tests the dependency first, and were it to
    judge it otherwise, the job would still not start without cells (kill_invalid_dep.txt)."""
    _release_to_end(session, rec, backend, job, why, result, "dependency_never", clear_begin=False)


def _release_to_end(
    session: Session,
    rec: Recorder,
    backend: SlurmBackend,
    job: Job,
    why: str,
    result: ActResult,
    kind: str,
    *,
    clear_begin: bool,
) -> None:
    try:
        backend.release(job.slurm_job_id)
        if clear_begin:
            backend.clear_begin_time(job.slurm_job_id)
    except SlurmError as exc:
        if _still_pending(backend, job.slurm_job_id) is not False:
            result.failed.append(f"release of job {job.slurm_job_id} for Slurm to end: {exc}")
        return
    job.reason = why
    rec.event(session, job, kind, why)
    session.commit()


def split_arrays(backend: SlurmBackend, splits: list[tuple[int, int]], result: ActResult) -> None:
    """Give array tasks records of their own; nothing to book: each shows as a held job next cycle."""
    for array, task in splits:
        try:
            backend.split_array_task(array, task)
        except SlurmError as exc:
            if not exc.unknown_job:  # a task cancelled meanwhile is simply gone
                result.failed.append(f"split of array task {array}_{task}: {exc}")


__all__ = ["ActResult", "Place", "act", "place", "preempt", "write_intents"]
