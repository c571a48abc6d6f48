"""The controller's side of backfill reservations and fairshare: running jobs' ends and users' recent
GPU-hours from the ledger reach the policy round, and the head's reservation reaches its waiting row."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from decide_support import NOW, context, row, slurm_job

from hivebatch.cells import CellAllocator
from hivebatch.controller.context import ControllerContext, parse_settings
from hivebatch.controller.decide import decide
from hivebatch.controller.decide.ends import expected_end
from hivebatch.controller.decide.tasks import TaskBuilder
from hivebatch.controller.decide.times import epoch
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.reconcile.usage import recent_usage
from hivebatch.db import Base, Job, open_database
from hivebatch.errors import ConfigError
from hivebatch.fairshare import Run, decayed_gpu_hours
from hivebatch.request import JobRequest

HOUR = dt.timedelta(hours=1)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> ControllerContext:
    return context(tmp_path_factory.mktemp("backfill"))


def _ledger(ctx: ControllerContext, jobs: list[Job], running: list[Job]) -> Ledger:
    alloc = CellAllocator(ctx.spec)
    for j in running:
        assert j.placement is not None
        assert alloc.adopt(str(j.slurm_job_id), j.vc_name or "", j.priority, j.placement).result == "placed"
    slurm = {j.slurm_job_id: slurm_job(j) for j in jobs}
    slurm.update({j.slurm_job_id: slurm_job(j, held=False, state="RUNNING") for j in running})
    return Ledger(jobs={j.slurm_job_id: j for j in jobs + running}, slurm=slurm, alloc=alloc)


def test_the_head_waits_reserved_a_long_job_waits_and_a_short_one_backfills(ctx: ControllerContext) -> None:
    running = row(1, JobRequest(vc="nlp", gpus=8), state="running", predicted_end=NOW + HOUR,
                  placement={"node2": list(range(8))}, start_time=NOW - HOUR, segment_start=NOW - HOUR)  # fmt: skip
    head = row(2, JobRequest(vc="nlp", gpus=16, time_limit_s=7200))
    long = row(3, JobRequest(vc="nlp", gpus=1, time_limit_s=3 * 3600))
    short = row(4, JobRequest(vc="nlp", gpus=1, time_limit_s=1800))
    out = decide(ctx, _ledger(ctx, [head, long, short], [running]), NOW)
    assert [p.job.slurm_job_id for p in out.places] == [4]
    waits = {w.job.slurm_job_id: w for w in out.waits}
    assert waits[2].reason.startswith("reserved: starts by 2026-11-16T10:00:00 on ")
    assert waits[2].predicted_start == NOW + HOUR
    assert waits[3].reason.startswith("would delay job 2, which holds its VC's reservation")


def test_with_backfill_off_the_small_jobs_take_the_room(ctx: ControllerContext) -> None:
    running = row(1, JobRequest(vc="nlp", gpus=8), state="running", predicted_end=NOW + HOUR,
                  placement={"node2": list(range(8))}, start_time=NOW - HOUR, segment_start=NOW - HOUR)  # fmt: skip
    head = row(2, JobRequest(vc="nlp", gpus=16, time_limit_s=7200))
    long = row(3, JobRequest(vc="nlp", gpus=1, time_limit_s=3 * 3600))
    off = ControllerContext(
        **{**ctx.__dict__, "settings": parse_settings(None, {"controller": {"backfill": False}})}
    )
    out = decide(off, _ledger(off, [head, long], [running]), NOW)
    assert [p.job.slurm_job_id for p in out.places] == [3]


def test_expected_end_is_the_prediction_while_ahead_else_the_time_limit() -> None:
    job = row(1, JobRequest(vc="nlp", gpus=1, time_limit_s=7200), state="running",
              predicted_end=NOW + HOUR, segment_start=NOW - HOUR, start_time=NOW - 3 * HOUR)  # fmt: skip
    assert expected_end(job, None, NOW) == epoch(NOW + HOUR)
    job.predicted_end = NOW - dt.timedelta(minutes=5)  # running late: its limit from this run's start
    assert expected_end(job, None, NOW) == epoch(NOW + HOUR)
    assert expected_end(job, 4 * 3600, NOW) == epoch(NOW + 3 * HOUR)  # Slurm's limit first
    job.predicted_end, job.request = None, {"vc": "nlp", "gpus": 1}
    assert expected_end(job, None, NOW) is None


def test_fairshare_puts_the_light_users_job_first(ctx: ControllerContext) -> None:
    heavy = row(1, JobRequest(vc="nlp", gpus=16, time_limit_s=3600), user="heavy")
    light = row(2, JobRequest(vc="nlp", gpus=16, time_limit_s=3600), user="light")
    ledger = _ledger(ctx, [heavy, light], [])
    assert [p.job.user for p in decide(ctx, ledger, NOW).places] == ["heavy"]  # arrival order
    ledger = _ledger(ctx, [heavy, light], [])
    ledger.usage = {"heavy": 500.0, "light": 2.0}
    assert [p.job.user for p in decide(ctx, ledger, NOW).places] == ["light"]


def test_settings_parse_and_reject_bad_values() -> None:
    s = parse_settings(None, {})
    assert s.backfill and s.starve_after_s == 12 * 3600 and s.fairshare_half_life_s == 7 * 86400
    s = parse_settings(None, {"controller": {"fairshare_half_life_h": 0, "starve_after_h": 2}})
    assert s.fairshare_half_life_s is None and s.starve_after_s == 7200
    for bad, word in (({"backfill": "yes"}, "true or false"), ({"fairshare_half_life_h": "x"}, "number of hours"),
                      ({"starve_after_h": -1}, "between 0")):  # fmt: skip
        with pytest.raises(ConfigError, match=word):
            parse_settings(None, {"controller": bad})


def test_recent_usage_reads_finished_and_running_jobs_from_the_ledger(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    engine, factory = open_database(None, {"database": {"url": url}})
    Base.metadata.create_all(engine)
    week = 7 * 86400.0
    with factory() as s:
        done = row(1, JobRequest(vc="nlp", gpus=4), state="done", user="ann", gpu_hours_guaranteed=8.0,
                   start_time=NOW - 3 * HOUR, end_time=NOW - HOUR)  # fmt: skip
        going = row(2, JobRequest(vc="nlp", gpus=2), state="running", user="ann", gpu_hours_guaranteed=0.0,
                    start_time=NOW - HOUR, segment_start=NOW - HOUR, placement={"node1": [0, 1]})  # fmt: skip
        ancient = row(3, JobRequest(vc="nlp", gpus=8), state="done", user="bob", gpu_hours_guaranteed=80.0,
                      start_time=NOW - 200 * 24 * HOUR, end_time=NOW - 199 * 24 * HOUR)  # fmt: skip
        s.add_all([done, going, ancient])
        s.commit()
        use = recent_usage(s, NOW, week)
    t = epoch(NOW)
    want = decayed_gpu_hours(Run("ann", 4, t - 3 * 3600, t - 3600), t, week) + decayed_gpu_hours(
        Run("ann", 2, t - 3600, t), t, week
    )
    assert use == {"ann": pytest.approx(want)}  # bob's job ended 28 half-lives ago: not read


def test_a_job_resumed_this_cycle_does_not_make_its_vcs_big_job_the_head(ctx: ControllerContext) -> None:
    # cv's socket cell is busy on node1 and nlp's cells hold node2 and node3, so cv's 8-GPU job fits only
    # on node4, where cv's requeued victim (typed gpu:g6:1) resumes at the start of the cycle. The head
    # is asked of the cells as the cycle found them (as in the simulator): the big job fitted there, so
    # it holds no reservation yet and cv's one-GPU job starts beside the victim instead of waiting for it.
    def running(jid: int, vc: str, node: str, gpus: list[int]) -> Job:
        return row(jid, JobRequest(vc=vc, gpus=len(gpus), time_limit_s=3600), state="running",
                   predicted_end=NOW + HOUR, placement={node: gpus}, start_time=NOW - HOUR,
                   segment_start=NOW - HOUR)  # fmt: skip

    busy = [running(10 + i, "cv", "node1", [4 + i]) for i in range(4)]
    busy += [
        running(20, "nlp", "node2", [0]),
        running(21, "nlp", "node3", [0]),
        running(22, "sys", "node1", [0]),
    ]
    big = row(1, JobRequest(vc="cv", gpus=8, time_limit_s=7200))
    victim = row(2, JobRequest(vc="cv", gpus=1, time_limit_s=1800), state="preempted", gres="gpu:g6:1",
                 placement={"node4": [6]}, start_time=NOW - HOUR / 2, segment_start=NOW - HOUR / 2)  # fmt: skip
    small = row(3, JobRequest(vc="cv", gpus=1, time_limit_s=3 * 3600))
    out = decide(ctx, _ledger(ctx, [big, victim, small], busy), NOW)
    places = {p.job.slurm_job_id: p for p in out.places}
    assert places[2].resumed and places[2].placement == {"node4": [6]}
    assert 3 in places and list(places[3].placement) == ["node4"]
    waits = {w.job.slurm_job_id: w for w in out.waits}
    assert not waits[1].reason.startswith("reserved"), waits[1].reason


def test_a_task_runs_for_slurms_time_limit_which_its_owner_may_have_lowered(ctx) -> None:  # type: ignore[no-untyped-def]
    # `scontrol update JobId=N TimeLimit=10` by the owner after submitting with -t 60: the request keeps 60
    job = row(1, JobRequest(vc="cv", gpus=1, time_limit_s=3600))
    builder = TaskBuilder(ctx, NOW)
    assert builder.task(job, JobRequest(vc="cv", gpus=1, time_limit_s=3600), 600).time_limit_s == 600
    assert builder.task(job, JobRequest(vc="cv", gpus=1, time_limit_s=3600), None).time_limit_s == 3600


@pytest.mark.parametrize(("niced", "head"), [(0, 2), (100, 3)])
def test_a_job_its_owner_niced_lets_the_vcs_next_job_be_the_head(
    ctx: ControllerContext, niced: int, head: int
) -> None:
    # plain Slurm started the later of two such jobs first when the earlier had --nice=100
    # (tests/fixtures/slurm/nice_order.txt)
    from dataclasses import replace

    running = row(1, JobRequest(vc="nlp", gpus=8), state="running", predicted_end=NOW + HOUR,
                  placement={"node2": list(range(8))}, start_time=NOW - HOUR, segment_start=NOW - HOUR)  # fmt: skip
    first = row(2, JobRequest(vc="nlp", gpus=16, time_limit_s=7200))
    later = row(3, JobRequest(vc="nlp", gpus=16, time_limit_s=7200))
    ledger = _ledger(ctx, [first, later], [running])
    ledger.slurm[2] = replace(ledger.slurm[2], nice=niced)
    out = decide(ctx, ledger, NOW)
    waits = {w.job.slurm_job_id: w for w in out.waits}
    assert waits[head].reason.startswith("reserved: starts by 2026-11-16T10:00:00 on ")
    assert not waits[5 - head].reason.startswith("reserved")
