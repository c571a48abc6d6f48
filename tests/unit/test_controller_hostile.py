"""Hostile numbers and one job that breaks the QoS model: that job is rejected with its reason, the
cycle goes on for the others."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import Env, make_env

from hivebatch.bounds import (
    DEFAULT_LIMITS,
    Limits,
    check_request,
    parse_limits,
    request_problem,
    slurm_time_limit,
)
from hivebatch.errors import ConfigError, HivebatchError
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (
            {"model": "resnet50", "batch_size": 32, "iters": 999999999999999999},
            "--iters 999999999999999999 is",
        ),
        ({"model": "resnet50", "batch_size": 2**40, "iters": 100}, "--batch-size 1099511627776 is more"),
    ],
)
def test_hostile_numbers_are_rejected_and_the_others_placed(env: Env, fields: dict, reason: str) -> None:
    bad = env.submit("alice", "cv", 1, **fields)
    good = env.submit("bob", "nlp", 2)
    report = env.cycle()
    assert report.ok
    job = env.job(bad)
    assert job.state == "rejected" and job.reason is not None and job.reason.startswith(reason)
    assert env.job(good).state == "placed"
    env.cycle()  # the same reason again: no new event
    assert len(env.events(bad, kind="rejected")) == 1


@pytest.mark.parametrize("minutes", [99999999999999, 9999999999, 600000])
def test_a_time_limit_past_the_bound_is_planned_as_none_and_its_job_placed(env: Env, minutes: int) -> None:
    # Slurm takes them all (416 days, and the absurd two wrapped into 32 bits); a running one's end
    # once overflowed the date of every cycle, for every job
    long = env.submit("alice", "cv", 1, extra=["-t", str(minutes)])
    assert env.cycle().ok and env.job(long).state == "placed"
    env.slurm.advance(2)
    assert env.cycle().ok and env.job(long).state == "running"
    other = env.submit("bob", "nlp", 2)
    assert env.cycle().ok and env.job(other).state == "placed"
    assert "time_limit_s" not in (env.job(long).request or {})


def test_a_hostile_gpu_memory_slice_is_refused_at_submit(env: Env) -> None:
    # a slice is a shard count Slurm sees at submit, so the job_submit plugin refuses it there
    with pytest.raises(SlurmError, match="GiB of GPU memory asked, but one GPU has 32"):
        env.submit("alice", "cv", 1, gpu_mem_mib=2**40)


def test_a_job_the_policy_cannot_plan_is_rejected_alone(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = env.submit("alice", "cv", 2)
    good = [env.submit("bob", "nlp", 2), env.submit("carol", "sys", 1)]
    plan = type(env.ctx.policy).plan

    def fragile(self, tasks, now, platform, limits=None):  # noqa: ANN001, ANN202
        if any(t.job_id == str(bad) for t in tasks):
            raise OverflowError("date value out of range")
        return plan(self, tasks, now, platform, limits)

    monkeypatch.setattr(type(env.ctx.policy), "plan", fragile)
    report = env.cycle()
    job = env.job(bad)
    assert job.state == "rejected"
    assert job.reason == (
        "hivebatch cannot plan it (OverflowError: date value out of range); check its numbers (-t, --iters, …) "
        "or resubmit"
    )
    assert [env.job(g).state for g in good] == ["placed", "placed"] and report.placed == 2


def test_a_job_failing_in_its_own_step_does_not_stop_the_round(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    step = importlib.import_module("hivebatch.controller.decide.classify")

    bad = env.submit("alice", "cv", 1)
    good = env.submit("bob", "nlp", 1)
    check = step.check_request

    def fragile(job, sj, spec, limits):  # noqa: ANN001, ANN202
        if job.slurm_job_id == bad:
            raise ValueError("year 10000 is out of range")
        return check(job, sj, spec, limits)

    monkeypatch.setattr(step, "check_request", fragile)
    env.cycle()
    assert env.job(bad).state == "rejected" and "ValueError: year 10000" in (env.job(bad).reason or "")
    assert env.job(good).state == "placed"


def test_slurm_time_limits_past_the_bound_say_nothing_about_the_job() -> None:
    from hivebatch.slurm.parse import parse_squeue_json

    jobs = {j.job_id: j for j in parse_squeue_json((FIXTURES / "squeue_huge_time_limits.json").read_text())}
    # sbatch -t 99999999999999 / 9999999999 / 99999999 / UNLIMITED, as the lab's squeue shows them
    assert [jobs[i].time_limit_s for i in (1, 2, 3, 4)] == [None, None, None, None]
    assert slurm_time_limit(3600) == 3600
    running = parse_squeue_json((FIXTURES / "squeue_huge_limits_running.json").read_text())
    assert [(j.state, j.time_limit_s) for j in running] == [("RUNNING", None), ("RUNNING", None)]


def test_hq_shows_a_job_running_under_a_limit_past_any_date() -> None:
    from hivebatch.cli.hq.rows import row_from_slurm
    from hivebatch.slurm.parse import parse_squeue_json

    for job in parse_squeue_json((FIXTURES / "squeue_huge_limits_running.json").read_text()):
        row = row_from_slurm(job)
        assert row.state == "RUNNING" and row.predicted_end is None


def test_bounds_check_and_config() -> None:
    req = JobRequest(vc="cv", gpus=2, time_limit_s=7200)
    assert request_problem(req) is None
    # a time limit is Slurm's to judge: past the bound it is planned as none, never refused
    assert request_problem(JobRequest(vc="cv", gpus=2, time_limit_s=10**12)) is None
    with pytest.raises(HivebatchError, match="--gpus 5000 is more"):
        check_request(JobRequest(vc="cv", gpus=5000))
    assert parse_limits({"limits": {"iters": 10}}) == Limits(iters=10)
    assert parse_limits({}) == DEFAULT_LIMITS
    with pytest.raises(ConfigError, match="limits.iter is unknown"):
        parse_limits({"limits": {"iter": 10}})
    with pytest.raises(ConfigError, match="positive whole number"):
        parse_limits({"limits": {"iters": -1}})
    assert parse_limits({"limits": {"time_limit_s": 86400}}).time_limit_s == 86400
    with pytest.raises(ConfigError, match="limits.time_limit_s may be at most 31536000"):
        parse_limits({"limits": {"time_limit_s": 2 * 31536000}})
