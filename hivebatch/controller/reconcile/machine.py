"""The job state machine: one hsub job's ledger state × its Slurm phase → its new ledger state.

Every transition writes one event. A job is finished here only on a final state Slurm reports
(``_finish``); jobs Slurm no longer lists at all are resolved in ``jobs.resolve_missing``.
"""

from __future__ import annotations

import datetime as dt
from contextlib import suppress
from dataclasses import replace

from sqlalchemy.orm import Session

from hivebatch.controller import incidents, owner_start
from hivebatch.controller.avoid import avoid_nodes
from hivebatch.controller.decide.eligible import OWNER_HELD, killed_for_dependency
from hivebatch.controller.decide.gres import untyped_count
from hivebatch.controller.decide.times import aware
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.notice import follow_notice
from hivebatch.controller.observe import to_utc
from hivebatch.controller.preemption import book_preemption
from hivebatch.controller.reconcile.slurm_view import gpus_of
from hivebatch.controller.record import Recorder, account_run, placement_text
from hivebatch.controller.slurm_grace import follow_slurm_grace
from hivebatch.db.models import Job
from hivebatch.request import (
    CLASS_PRIORITY,
    HELD_BEGIN_AT,
    begin_kept,
    begin_marked,
    held_over_ours,
    kept_gpus,
    owner_hold_marked,
    released_by_owner,
)
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import REQUEUED_HELD, AcctRecord, SlurmError, SlurmJob

#: Slurm's reason for a job its scheduler held because it can never run as it stands
NEVER_RUNNABLE = "BadConstraints"


#: Slurm's last reason of a job that ended, which says nothing of why it ended: no reason, or the hold
#: the job waited in (hivebatch's own, until it was placed), shown after a job cancelled while waiting
_NOT_WHY_IT_ENDED = frozenset({"None", "JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state"})


def _why_it_ended(reason: str | None) -> str:
    return f" ({reason})" if reason and reason not in _NOT_WHY_IT_ENDED else ""


def finish(
    session: Session, rec: Recorder, job: Job, state: str, sj: SlurmJob | AcctRecord | None, why: str
) -> None:
    """Close a job: book its last run, set the final state, one event."""
    end = (to_utc(sj.end_time) if sj is not None else None) or rec.now
    if state == "preempted":
        # Slurm preempted it itself (PreemptMode=REQUEUE shows PREEMPTED briefly); it will come back pending
        book_preemption(session, rec, job, end, "preempted", why)
        return
    account_run(session, job, end)
    job.state = state
    job.intent = None
    job.notice_until = None
    job.notice_by = None
    job.end_time = end
    if sj is not None and sj.exit_code:
        job.exit_code = str(sj.exit_code)
    if state == "done" and job.expected_completion is not None:
        job.meets_qos = end <= job.expected_completion
    job.reason = None if state == "done" else why
    rec.event(session, job, "finished", f"{state}: {why}", {"state": state, "exit_code": job.exit_code})


def start(session: Session, rec: Recorder, job: Job, sj: SlurmJob) -> None:
    begun = to_utc(sj.start_time) or rec.now
    actual = gpus_of(sj)
    if job.start_time is None:
        job.start_time = begun
    job.segment_start = begun
    job.state = "running"
    job.reason = None
    if actual and job.placement and actual != job.placement and not picked_within(job, actual):
        # started by Slurm without a placement of ours (or adopted): where it runs is where it is
        rec.event(
            session,
            job,
            "placement_mismatch",
            f"Slurm runs it on {placement_text(actual)}, not on the earlier {placement_text(job.placement)}",
            {"granted": job.placement, "actual": actual},
        )
    if actual:
        job.placement = actual
    rec.event(
        session, job, "started", f"running on {placement_text(job.placement)}", {"placement": job.placement}
    )


def picked_within(job: Job, actual: dict[str, list[int]]) -> bool:
    """Did Slurm pick an untyped job's GPUs among those held for it (its count on each of its nodes)?"""
    per_node = untyped_count(job.gres)
    held = job.placement or {}
    if per_node is None or set(actual) != set(held):
        return False
    return all(len(set(v)) == per_node and set(v) <= {int(i) for i in held[n]} for n, v in actual.items())


def granted_kept(session: Session, rec: Recorder, job: Job, sj: SlurmJob, backend: SlurmBackend) -> bool:
    """Does Slurm run the job on the GPU indices it was granted (IDX in squeue's gres detail, confirmed
    by a fresh read of the job), or, pinned untyped, on GPUs among those held for it? If not, that is
    an incident, never accepted: the job is requeued and held, to be placed again (a typed job on its
    granted indices, as Slurm keeps its typed gres). Until the requeue succeeds the ledger keeps the
    granted GPUs, and the ones really in use are held as foreign from the nodes' GPU use."""
    actual = gpus_of(sj)
    granted = {n: sorted(int(i) for i in v) for n, v in (job.placement or {}).items()}
    if not actual or not granted or actual == granted:
        return True
    # squeue's IDX differs: the job's own record decides before it is called an incident
    with suppress(SlurmError):
        actual = backend.job_gpus(job.slurm_job_id) or actual
    if actual == granted or picked_within(job, actual):
        return True
    where = f"Slurm runs it on {placement_text(actual)}, not on the granted {placement_text(granted)}"
    data = {"granted": granted, "actual": actual}
    try:
        backend.requeue_hold(job.slurm_job_id)
    except SlurmError as exc:
        msg = f"{where}; requeue failed, tried again next cycle: {exc}"
        rec.event(session, job, incidents.KIND, msg, data)
        return False
    times = incidents.earlier_requeues(session, job, rec.now) + 1
    book_preemption(
        session,
        rec,
        job,
        rec.now,
        incidents.KIND,
        f"{where}; requeued and held to be placed again",
        {**data, "requeued": True},
    )
    if incidents.repeating(times, granted, actual):
        job.reason = incidents.repeated_reason(times, where, job)
    elif untyped_count(job.gres) is not None:
        job.reason = "Slurm ran it on other GPUs than granted; requeued, it starts again where Slurm has no other GPUs to pick"
    else:
        job.reason = "Slurm ran it on other GPUs than granted; requeued, it starts again on its granted GPUs"
    return False


def hold(session: Session, rec: Recorder, job: Job, backend: SlurmBackend) -> None:
    try:
        backend.hold(job.slurm_job_id)
    except SlurmError as exc:
        rec.event(session, job, "act_failed", f"hold failed: {exc}")


def _confirmed_place(session: Session, rec: Recorder, job: Job) -> None:
    job.intent = None
    rec.event(
        session, job, "placed", f"released on {placement_text(job.placement)} (confirmed after restart)"
    )


def _follow_place_intent(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> None:
    """The controller stopped between recording a placement and seeing it carried out."""
    if ph == "pending" and sj.held:
        ledger.redo_place.append(job)  # update/release may not have happened: do it again, same placement
    elif ph == "pending":
        _confirmed_place(session, rec, job)
        job.state = "placed"
    elif ph == "running":
        _confirmed_place(session, rec, job)
        if granted_kept(session, rec, job, sj, backend):
            start(session, rec, job, sj)
    else:
        finish(session, rec, job, ph, sj, f"Slurm state {sj.state}")


def _follow_preempt_intent(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> None:
    """The controller stopped between recording a preemption and seeing it carried out."""
    if ph == "running":
        ledger.redo_preempt.append(job)
    elif ph == "pending":
        book_preemption(
            session, rec, job, rec.now, "preempted", "requeued and held (confirmed after restart)"
        )
        if not sj.held:
            hold(session, rec, job, backend)
    else:
        finish(session, rec, job, ph, sj, f"Slurm state {sj.state}")


def _follow_account(session: Session, rec: Recorder, job: Job, sj: SlurmJob) -> None:
    """A waiting job's VC and class are its Slurm account and QOS, which its owner may change
    (``scontrol update job N Account=… QOS=…``): the ledger follows, so its cells, estimates and usage
    are booked where Slurm books the job."""
    if sj.qos and sj.qos != job.qos and sj.qos in CLASS_PRIORITY:
        job.qos, job.priority = sj.qos, CLASS_PRIORITY[sj.qos]
    if sj.account and sj.account != job.vc_name:
        why = f"moved from VC {job.vc_name} to VC {sj.account}: its Slurm account is {sj.account} now"
        job.vc_name = job.account = sj.account
        rec.event(session, job, "moved", why, {"vc": sj.account})


def _follow_waiting(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> None:
    if ph == "running":
        rec.event(session, job, "started_unplaced", "Slurm started it although hivebatch had not placed it")
        start(session, rec, job, sj)
    elif not sj.held and killed_for_dependency(sj, rec.now, ledger.slurm):
        pass  # released for Slurm to cancel (act.end_doomed): held again, it would wait for Slurm's re-test
    elif not sj.held:
        # the owner released their own hold: it would run without GPUs chosen by the cells
        rec.event(session, job, "held", "released without a placement; held again until hivebatch places it")
        hold(session, rec, job, backend)
        if released_by_owner(sj) and not kept_gpus(sj):
            # held by the Operator now, so the job_submit plugin's far begin time can go, back to the
            # last start its owner gave (--begin, or a later scontrol update) if that is still to come;
            # one that kept an earlier pin's GPUs stays parked (its hold parks it again), or an admin's
            # release would start it on them
            begin = begin_kept(sj, job.owner_begin)
            try:
                backend.clear_begin_time(
                    job.slurm_job_id, to=begin if begin and begin > aware(rec.now) else None
                )
            except SlurmError as exc:
                rec.event(session, job, "act_failed", f"could not clear its begin time: {exc}")
    elif (
        owner_hold_marked(sj)
        and sj.array_job_id is not None
        and not (job.reason or "").startswith(OWNER_HELD)
    ):
        # an array's record, first seen held by them: the site factor keeps their start time from
        # replacing the hold's mark; the plugin writes it with the hold of a job of its own, but not on
        # an array's records (slurmctld would carry it to the next record and refuse it there)
        try:
            backend.guard_owner_hold(job.slurm_job_id)
        except SlurmError as exc:
            rec.event(session, job, "act_failed", f"could not mark its owner's hold: {exc}")
    elif held_over_ours(sj):
        # it waits as their hold; made a user hold, their scontrol release reaches it as on plain Slurm
        try:
            backend.user_hold(job.slurm_job_id)
        except SlurmError as exc:
            rec.event(session, job, "act_failed", f"could not make its hold its owner's: {exc}")
        else:
            rec.event(session, job, "held", f"{OWNER_HELD}: scontrol release {sj.display_id} releases it")


def _follow_start_time(session: Session, rec: Recorder, job: Job, sj: SlurmJob) -> None:
    """A start time the owner sets while the job waits is kept: their hold and release replace Slurm's
    begin time with the plugin's marks, and plain Slurm keeps it through both (recorded:
    tests/fixtures/slurm/owner_start_time.txt)."""
    if owner_start.never_started(job) and not begin_marked(sj):
        owner_start.keep(session, rec, job, sj, sj.eligible_time)


def _follow_placed(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> None:
    if ph == "running":
        if granted_kept(session, rec, job, sj, backend):
            start(session, rec, job, sj)
    elif sj.reason == REQUEUED_HELD:  # it started, and was requeued held before we saw it run
        _keep_requeue_hold(session, rec, ledger, job, sj, backend)
    elif sj.held and sj.reason == NEVER_RUNNABLE:
        # Slurm's scheduler held the pin itself: it can never run the job as asked on those nodes
        # (tests/fixtures/slurm/bad_constraints_held.txt). Placed there again it would be held again
        # at once, each cycle; other nodes may serve, and none for an hour if none does.
        avoid_nodes(session, job.slurm_job_id, sorted(job.placement or {}), rec.now)
        job.state = "queued"
        job.reason = (
            f"Slurm found it can never run as asked on {placement_text(job.placement or {})} (Slurm's reason: "
            f"{NEVER_RUNNABLE}); placed again on other nodes"
        )
        rec.event(session, job, "taken_back", job.reason, {"placement": job.placement})
    elif sj.held:
        job.state = "queued"
        rec.event(session, job, "held", "held again in Slurm after it was placed; its cells are given back")


def _follow_running(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> None:
    if ph == "running":
        granted_kept(session, rec, job, sj, backend)
        _end_by_its_limit(job, sj)
        _end_after_suspension(job, sj, rec.now)
        return
    # running → pending: Slurm requeued it (its own preemption, node failure, an admin)
    if sj.reason == REQUEUED_HELD:
        _keep_requeue_hold(session, rec, ledger, job, sj, backend)
        return
    book_preemption(
        session,
        rec,
        job,
        rec.now,
        "requeued",
        f"Slurm requeued it ({sj.reason or sj.state}); it waits to be placed again",
    )
    if not sj.held:
        hold(session, rec, job, backend)


def _end_by_its_limit(job: Job, sj: SlurmJob) -> None:
    """Slurm ends a run at its start plus its time limit, which an owner may lower while it runs
    (tests/fixtures/slurm/time_limit_owner_update.txt): the predicted end, and the slack, follow."""
    if not sj.time_limit_s or job.segment_start is None or job.predicted_end is None:
        return
    if (job.predicted_end - job.segment_start).total_seconds() <= sj.time_limit_s:
        return  # also keeps clear of limits so large that their end overflows a date
    limit_end = job.segment_start + dt.timedelta(seconds=sj.time_limit_s)
    job.predicted_end = limit_end
    if job.expected_completion is not None:
        job.slack_s = (job.expected_completion - limit_end).total_seconds()


def _end_after_suspension(job: Job, sj: SlurmJob, now: dt.datetime) -> None:
    """An admin's scontrol suspend stops the run and Slurm moves its end by the time it was suspended
    (tests/fixtures/slurm/squeue_resumed_twice.json); the predicted end, and the slack, move with it, by
    the clock while it stays suspended. A job never suspended keeps its prediction as it is."""
    held = sj.suspended_s(aware(now))
    if held <= 0 or job.segment_start is None:
        return
    runs = [s for s in (job.latency_s, sj.time_limit_s) if s]
    if not runs:
        return
    end = job.segment_start + dt.timedelta(seconds=min(runs) + held)
    job.predicted_end = end
    if job.expected_completion is not None:
        job.slack_s = (job.expected_completion - end).total_seconds()


def _keep_requeue_hold(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, backend: SlurmBackend
) -> None:
    """Someone else requeued it held (its owner's or an admin's ``scontrol requeuehold``, Slurm's
    RequeueExitHold): plain Slurm leaves it held until they release it, so it waits as an owner's hold
    does. The plugin's owner-hold begin time keeps Slurm from starting it on their release, on the GPU
    indices it kept, before the controller places it again (tests/fixtures/slurm/requeuehold_owner.txt)."""
    try:
        backend.mark_owner_hold(job.slurm_job_id)
    except SlurmError as exc:
        rec.event(session, job, "act_failed", f"could not mark its hold as its owner's: {exc}")
    else:  # this cycle's decisions read the job as Slurm lists it now
        ledger.slurm[job.slurm_job_id] = replace(sj, eligible_time=HELD_BEGIN_AT)
    # not a preemption: the run ends where they stopped it, and it resumes on the GPU indices it kept
    account_run(session, job, rec.now)
    job.intent = None
    job.state = "queued"
    job.reason = f"requeued and held by its owner or an admin: scontrol release {sj.display_id} lets hivebatch place it again"
    rec.event(session, job, "requeued", job.reason)


def follow(
    session: Session, rec: Recorder, ledger: Ledger, job: Job, sj: SlurmJob, ph: str, backend: SlurmBackend
) -> None:
    """One hsub job: ledger state × Slurm phase → new ledger state (see the table in the README section)."""
    follow_slurm_grace(session, rec, job, sj, ph)
    if follow_notice(session, rec, ledger, job, sj, ph, backend):
        return
    if job.intent == "place":
        _follow_place_intent(session, rec, ledger, job, sj, ph, backend)
    elif job.intent == "preempt":
        _follow_preempt_intent(session, rec, ledger, job, sj, ph, backend)
    elif ph not in ("pending", "running"):
        finish(session, rec, job, ph, sj, f"Slurm state {sj.state}" + _why_it_ended(sj.reason))
    elif job.state in ("queued", "preempted", "rejected"):
        _follow_account(session, rec, job, sj)
        _follow_waiting(session, rec, ledger, job, sj, ph, backend)
        _follow_start_time(session, rec, job, sj)
    elif job.state == "placed":
        _follow_placed(session, rec, ledger, job, sj, ph, backend)
    elif job.state == "running":
        _follow_running(session, rec, ledger, job, sj, ph, backend)


def follow_foreign(session: Session, rec: Recorder, job: Job, sj: SlurmJob, ph: str) -> None:
    """A job not submitted through hsub: only its GPUs matter, they count as occupied while it runs."""
    if ph == "running":
        actual = gpus_of(sj)
        if actual and actual != job.placement:
            job.placement = actual
        if job.state != "running":
            job.state = "running"
            job.segment_start = to_utc(sj.start_time) or rec.now
    elif ph == "pending":
        account_run(session, job, rec.now)
        job.state = "queued"
    else:
        finish(session, rec, job, ph, sj, f"Slurm state {sj.state}")
