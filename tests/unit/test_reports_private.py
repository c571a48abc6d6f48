"""The private-cluster estimate: first come, first served on the VC's own GPUs."""

from __future__ import annotations

import datetime as dt

import pytest

from hivebatch.reports.private import PrivateJob, private_queue_delays

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def job(job_id: str, submit_h: float, gpus: int, run_h: float) -> PrivateJob:
    return PrivateJob(job_id, T0 + dt.timedelta(hours=submit_h), gpus, run_h * 3600)


def test_jobs_that_fit_side_by_side_do_not_wait() -> None:
    assert private_queue_delays([job("a", 0, 4, 2), job("b", 0, 4, 2)], 8) == {"a": 0, "b": 0}


def test_a_job_waits_for_enough_gpus_and_later_jobs_queue_behind_it() -> None:
    # 8 GPUs: a (6) runs 0–3; b (4) must wait until 3; c (2) arrives at 1 and would fit, but FCFS keeps it
    # behind b, so it starts at 3 too (b 4 + c 2 = 6 ≤ 8).
    delays = private_queue_delays([job("a", 0, 6, 3), job("b", 0.5, 4, 1), job("c", 1, 2, 1)], 8)
    assert delays["a"] == 0
    assert delays["b"] == pytest.approx(2.5 * 3600)
    assert delays["c"] == pytest.approx(2 * 3600)


def test_frees_gpus_from_several_ended_jobs() -> None:
    # 4 GPUs: a (2) 0–1, b (2) 0–2, c (4) must wait for both: starts at 2
    delays = private_queue_delays([job("a", 0, 2, 1), job("b", 0, 2, 2), job("c", 0, 4, 1)], 4)
    assert delays["c"] == pytest.approx(2 * 3600)


def test_jobs_larger_than_the_vc_are_left_out() -> None:
    assert private_queue_delays([job("big", 0, 16, 1), job("ok", 0, 4, 1)], 8) == {"ok": 0}
    assert private_queue_delays([], 8) == {}
