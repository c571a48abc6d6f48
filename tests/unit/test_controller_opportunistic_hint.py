"""A job its VC has no room for is told when idle GPUs would take it as opportunistic work."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
from decide_support import NOW, context, make_round, row

from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide import Wait, decide
from hivebatch.controller.decide.opportunistic import hint, suggest_opportunistic
from hivebatch.controller.decide.room import screen_hopeless
from hivebatch.db.models import Job
from hivebatch.request import JobRequest

HINT = "scontrol update job 9 qos=opportunistic"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> ControllerContext:
    return context(tmp_path_factory.mktemp("opportunistic"))


def _running(jid: int, vc: str, placement: dict[str, list[int]], ends_in: dt.timedelta | None) -> Job:
    gpus = sum(len(v) for v in placement.values())
    end = NOW + ends_in if ends_in is not None else None
    return row(jid, JobRequest(vc=vc, gpus=gpus), state="running", predicted_end=end, placement=placement)


def _full_cv(ends_in: dt.timedelta | None) -> list[Job]:
    # cv's 12 GPUs all busy; node3 and node4 idle
    return [
        _running(1, "cv", {"node1": list(range(8))}, ends_in),
        _running(2, "cv", {"node2": [0, 1, 2, 3]}, ends_in),
    ]


def _decide_waiting(ctx: ControllerContext, running: list[Job], waiting: Job) -> Wait:
    r = make_round(ctx, [*running, waiting])
    for job in running:
        assert (
            r.alloc.adopt(str(job.slurm_job_id), job.vc_name, job.priority, job.placement).result == "placed"
        )
    out = decide(ctx, r.ledger, NOW)
    assert not out.places
    (wait,) = out.waits
    return wait


def test_a_job_its_full_vc_keeps_waiting_is_told_the_idle_gpus_would_take_it(ctx: ControllerContext) -> None:
    wait = _decide_waiting(ctx, _full_cv(dt.timedelta(hours=2)), row(9, JobRequest(vc="cv", gpus=2)))
    assert wait.reason.endswith(HINT), wait.reason
    assert "preempted when a VC needs them" in wait.reason


def test_no_hint_when_no_idle_gpu_would_take_it(ctx: ControllerContext) -> None:
    busy = [
        *_full_cv(dt.timedelta(hours=2)),
        _running(3, "nlp", {"node3": list(range(8)), "node4": list(range(8))}, dt.timedelta(hours=2)),
        _running(4, "sys", {"node2": [4, 5]}, dt.timedelta(hours=2)),
        _running(5, "sys", {"node2": [6]}, dt.timedelta(hours=2)),
        _running(6, "sys", {"node2": [7]}, dt.timedelta(hours=2)),
    ]
    wait = _decide_waiting(ctx, busy, row(9, JobRequest(vc="cv", gpus=2)))
    assert "opportunistic" not in wait.reason


def test_no_hint_for_a_shape_the_idle_gpus_cannot_hold(ctx: ControllerContext) -> None:
    # 18 GPUs idle, but no node has 8 of them
    nlp = {"node3": [0], "node4": [0]}
    running = [*_full_cv(dt.timedelta(hours=2)), _running(3, "nlp", nlp, dt.timedelta(hours=2))]
    wait = _decide_waiting(ctx, running, row(9, JobRequest(vc="cv", gpus=8, nodes=1)))
    assert "opportunistic" not in wait.reason, wait.reason


def test_no_hint_when_its_vc_frees_room_within_minutes(ctx: ControllerContext) -> None:
    wait = _decide_waiting(ctx, _full_cv(dt.timedelta(minutes=3)), row(9, JobRequest(vc="cv", gpus=2)))
    assert wait.predicted_start is not None and wait.predicted_start <= NOW + dt.timedelta(minutes=3)
    assert "opportunistic" not in wait.reason


def test_no_hint_for_an_opportunistic_job_or_a_rejected_one(ctx: ControllerContext) -> None:
    # the cluster is idle: only the job's own kind keeps the hint away
    opp_req, bad_req = JobRequest(vc="cv", gpus=2, qos="opportunistic"), JobRequest(vc="cv", gpus=2)
    opp, bad = row(9, opp_req), row(10, bad_req)
    r = make_round(ctx, [opp, bad])
    for job, req in ((opp, opp_req), (bad, bad_req)):
        r.fresh.append((job, req, r.ledger.slurm[job.slurm_job_id]))
    screen_hopeless(r)
    assert {t.job_id for t in r.tasks} == {"9", "10"}
    r.out.waits = [
        Wait(opp, "waits for 2 idle GPUs", shape=(1, 2)),
        Wait(bad, "bad", rejected=True, shape=(1, 2)),
    ]
    suggest_opportunistic(r)
    assert [w.reason for w in r.out.waits] == ["waits for 2 idle GPUs", "bad"]
    r.out.waits = [Wait(bad, "waiting", shape=(1, 2))]
    suggest_opportunistic(r)
    assert r.out.waits[0].reason == "waiting; " + hint("10")


def test_an_array_task_is_named_in_the_hint_as_hq_shows_it(ctx: ControllerContext) -> None:
    # seen on the lab: hq listed alice's task as 1948_0 while its hint said scontrol update job 1949
    waiting = row(9, JobRequest(vc="cv", gpus=2))
    r = make_round(ctx, [*_full_cv(dt.timedelta(hours=2)), waiting])
    r.ledger.slurm[9] = replace(r.ledger.slurm[9], array_job_id=8, array_task_id=0)
    for job in _full_cv(dt.timedelta(hours=2)):
        r.alloc.adopt(str(job.slurm_job_id), job.vc_name, job.priority, job.placement)
    (wait,) = decide(ctx, r.ledger, NOW).waits
    assert wait.reason.endswith("scontrol update job 8_0 qos=opportunistic"), wait.reason


def test_a_running_array_task_is_named_as_hq_shows_it_to_the_job_waiting_for_it(
    ctx: ControllerContext,
) -> None:
    from hivebatch.controller.decide.notice import prime_notices

    running = _full_cv(dt.timedelta(hours=2))
    r = make_round(ctx, running)
    r.ledger.slurm[2] = replace(r.ledger.slurm[2], array_job_id=1, array_task_id=4)
    prime_notices(r)
    assert r.alloc.notice is not None and r.alloc.notice.names == {"2": "1_4"}
