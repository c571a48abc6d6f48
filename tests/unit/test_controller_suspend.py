"""An admin's scontrol suspend moves a running job's predicted end as Slurm moves its end (recorded on the
lab: tests/fixtures/slurm/squeue_suspended.json, squeue_resumed.json, squeue_resumed_twice.json)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from hivebatch.controller.reconcile.machine import _end_after_suspension
from hivebatch.db.models import Job
from hivebatch.slurm.parse import parse_squeue_json
from hivebatch.slurm.types import SlurmJob

START = dt.datetime(2026, 11, 28, 16, 0, 31)  # naive UTC, as the ledger keeps it


def _recorded(slurm_fixture: Callable[[str], str], name: str) -> SlurmJob:
    (sj,) = parse_squeue_json(slurm_fixture(name))
    return sj


def _running(latency_s: float | None = 120.0) -> Job:
    return Job(slurm_job_id=669, state="running", segment_start=START, latency_s=latency_s,
               predicted_end=START + dt.timedelta(seconds=latency_s or 600),
               expected_completion=START + dt.timedelta(minutes=20))  # fmt: skip


def test_the_time_suspended_is_read_as_slurm_counts_it(slurm_fixture: Callable[[str], str]) -> None:
    at = dt.datetime(2026, 11, 28, 16, 0, 49, tzinfo=dt.UTC)
    suspended = _recorded(slurm_fixture, "squeue_suspended.json")  # suspended at 16:00:34 after 3 s
    assert suspended.state == "SUSPENDED" and suspended.pre_suspend_s == 3
    assert suspended.suspended_s(at) == 15.0  # and it goes on with the clock
    once = _recorded(slurm_fixture, "squeue_resumed.json")  # resumed at 16:00:49
    assert once.suspended_s(at + dt.timedelta(minutes=5)) == 15.0
    assert once.start_time is not None and once.time_limit_s == 600
    # Slurm's own end moved by as much: 16:10:31 became 16:10:46
    twice = _recorded(slurm_fixture, "squeue_resumed_twice.json")  # 10 s more, resumed at 16:01:10
    assert twice.suspended_s(at + dt.timedelta(minutes=5)) == 25.0


def test_a_suspended_jobs_predicted_end_moves_with_the_time_it_was_suspended(
    slurm_fixture: Callable[[str], str],
) -> None:
    job = _running()
    now = dt.datetime(2026, 11, 28, 16, 1, 4)  # 30 s into its suspension
    _end_after_suspension(job, _recorded(slurm_fixture, "squeue_suspended.json"), now)
    assert job.predicted_end == START + dt.timedelta(seconds=120 + 30)
    assert job.slack_s == (20 * 60) - (120 + 30)
    job = _running()
    _end_after_suspension(job, _recorded(slurm_fixture, "squeue_resumed_twice.json"), now)
    assert job.predicted_end == START + dt.timedelta(seconds=120 + 25)
    # no prediction of its own: its time limit, as Slurm ends it (16:10:56)
    job = _running(latency_s=None)
    _end_after_suspension(job, _recorded(slurm_fixture, "squeue_resumed_twice.json"), now)
    assert job.predicted_end == dt.datetime(2026, 11, 28, 16, 10, 56)


def test_a_job_never_suspended_keeps_its_prediction(slurm_fixture: Callable[[str], str]) -> None:
    job = _running()
    job.predicted_end = START + dt.timedelta(seconds=100)  # as the controller set it when placing
    never = SlurmJob(job_id=669, name="j", user="alice", account="cv", qos="normal", state="RUNNING", reason="",
                     start_time=START.replace(tzinfo=dt.UTC), time_limit_s=600)  # fmt: skip
    _end_after_suspension(job, never, START + dt.timedelta(minutes=1))
    assert job.predicted_end == START + dt.timedelta(seconds=100)
