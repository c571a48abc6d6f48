"""The job state machine, the preemption bookkeeping and the allocator rebuild, each on its own."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest
from controller_support import Env, make_env
from decide_support import NOW, row, slurm_job
from sqlalchemy.orm import Session

from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import Observation, phase
from hivebatch.controller.preemption import book_preemption
from hivebatch.controller.reconcile import rebuild_allocator
from hivebatch.controller.reconcile.machine import follow
from hivebatch.controller.record import Recorder
from hivebatch.db.models import Event, Job
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmNode


class Backend:
    """Records the holds the state machine asks for; nothing else is called."""

    def __init__(self) -> None:
        self.held: list[int] = []

    def hold(self, job_id: int) -> None:
        self.held.append(job_id)


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def _kinds(session: Session) -> list[str]:
    session.flush()
    return [e.kind for e in session.query(Event).order_by(Event.id)]


def _step(env: Env, job: Job, state: str, held: bool) -> tuple[Ledger, Backend, list[str]]:
    backend = Backend()
    with env.factory() as session:
        session.add(job)
        session.flush()
        sj = slurm_job(job, held=held, state=state)
        sj.start_time = NOW.replace(tzinfo=dt.UTC)  # as every backend reads it: aware UTC
        ledger = Ledger(jobs={job.slurm_job_id: job}, slurm={job.slurm_job_id: sj})
        follow(session, Recorder(NOW), ledger, job, sj, phase(state), backend)
        return ledger, backend, _kinds(session)


def test_placed_job_seen_running_starts(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1), state="placed", placement={"node1": [0]})
    _ledger, backend, kinds = _step(env, job, "RUNNING", held=False)
    assert job.state == "running" and job.segment_start == NOW and kinds == ["started"] and not backend.held


def test_running_job_requeued_by_slurm_is_preempted_and_held(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1), state="running", placement={"node1": [0]},
              segment_start=NOW - dt.timedelta(hours=2))  # fmt: skip
    _ledger, backend, kinds = _step(env, job, "PENDING", held=False)
    assert job.state == "preempted" and job.preemptions == 1 and kinds == ["requeued"]
    assert backend.held == [7] and job.gpu_hours_lost == pytest.approx(2.0)


def test_place_intent_on_a_still_held_job_is_redone(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1), intent="place", placement={"node1": [0]})
    ledger, _backend, kinds = _step(env, job, "PENDING", held=True)
    assert ledger.redo_place == [job] and job.intent == "place" and kinds == []


def test_preempt_intent_confirmed_pending_is_booked_once(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1), state="running", intent="preempt", placement={"node1": [0]})
    _ledger, backend, kinds = _step(env, job, "PENDING", held=True)
    assert job.state == "preempted" and job.intent is None and job.preemptions == 1
    assert kinds == ["preempted"] and backend.held == []


def test_final_state_finishes_the_job(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1), state="running", placement={"node1": [0]})
    _ledger, _backend, kinds = _step(env, job, "FAILED", held=False)
    assert job.state == "failed" and job.reason == "Slurm state FAILED" and kinds == ["finished"]


@pytest.mark.parametrize(
    ("reason", "why"),
    [
        ("TimeLimit", "Slurm state CANCELLED (TimeLimit)"),
        ("DependencyNeverSatisfied", "Slurm state CANCELLED (DependencyNeverSatisfied)"),
        # seen on the lab: hq --finished said "CANCELLED (None)" for a job cancelled while it ran, and
        # "CANCELLED (JobHeldAdmin)" for one cancelled while it waited in hivebatch's hold
        ("None", "Slurm state CANCELLED"),
        ("JobHeldAdmin", "Slurm state CANCELLED"),
    ],
)
def test_a_finished_jobs_reason_keeps_what_slurm_said_of_why_it_ended(
    env: Env, reason: str, why: str
) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1))
    backend = Backend()
    with env.factory() as session:
        session.add(job)
        session.flush()
        sj = replace(slurm_job(job, held=False, state="CANCELLED"), reason=reason)
        follow(
            session, Recorder(NOW), Ledger(jobs={7: job}, slurm={7: sj}), job, sj, phase("CANCELLED"), backend
        )
    assert job.state == "cancelled" and job.reason == why


def test_owner_released_waiting_job_is_held_again(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1))
    _ledger, backend, kinds = _step(env, job, "PENDING", held=False)
    assert job.state == "queued" and backend.held == [7] and kinds == ["held"]


def test_book_preemption_without_a_run_books_no_hours(env: Env) -> None:
    job = row(7, JobRequest(vc="cv", gpus=1), state="placed", intent="preempt", placement={"node1": [0]})
    with env.factory() as session:
        session.add(job)
        book_preemption(session, Recorder(NOW), job, None, "preempted", "why", {"by": 8})
        assert (job.state, job.intent, job.preemptions) == ("preempted", None, 1) and not job.gpu_hours_lost
        assert _kinds(session) == ["preempted"]


def test_rebuild_holds_ledger_jobs_and_marks_unknown_nodes_bad(env: Env) -> None:
    held = row(7, JobRequest(vc="nlp", gpus=2), state="running", placement={"node2": [0, 1]})
    waiting = row(8, JobRequest(vc="cv", gpus=1))
    nodes = {
        n: SlurmNode(name=n, state="IDLE", bad=False, gpu_indices=list(range(8)))
        for n in ("node1", "node2", "node3")
    }
    nodes["node1"].gpus_used = [5]  # busy with work the ledger does not know
    obs = Observation(now=NOW, jobs={}, nodes=nodes)
    with env.factory() as session:
        session.add_all([held, waiting])
        session.flush()
        ledger = Ledger(jobs={7: held, 8: waiting}, slurm={})
        alloc = rebuild_allocator(session, Recorder(NOW), ledger, obs, env.ctx.spec, env.ctx.data)
        assert set(alloc.jobs()) == {"7"}
        assert ledger.bad_nodes == {"node4"} and ledger.alloc is alloc
        gmap = alloc.gpu_map()
        assert gmap["node1"][5].foreign and gmap["node4"][0].bad and gmap["node2"][0].job == "7"
        assert _kinds(session) == ["node_bad"]
