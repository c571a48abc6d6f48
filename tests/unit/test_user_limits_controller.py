"""Per-user limits on the strict classes through the controller: the usage file it writes each cycle,
which the real job_submit.lua (run by the fake Slurm) reads, and the class a job runs in at placement."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from controller_support import CONFIG, Env, lua_read, make_env

from hivebatch.cli.hsub.main import slurm_refusal
from hivebatch.controller.usage import usage_lua, write_usage
from hivebatch.errors import HivebatchError
from hivebatch.jobsubmit import site_table, usage_file
from hivebatch.slurm import SlurmError
from hivebatch.userlimits import StrictUse

LIMITS = """
user_limits:
  urgent: {gpu_hours_per_week: 48, running_jobs: 2}
  prior: {running_jobs: 1}
"""


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    config = CONFIG.replace("interval_s: 1}", f"interval_s: 1, usage_file: {tmp_path / 'usage.lua'}}}")
    # a clock that moves only when the test moves it: GPU-hours are exact whenever the second ticks over
    frozen = dt.datetime.now(dt.UTC).replace(microsecond=0)
    env = make_env(tmp_path, config + LIMITS, clock=lambda: frozen)
    # the controller's clock is the fake Slurm's, so GPU-hours add up as the fake's time moves on
    monkeypatch.setattr("hivebatch.controller.observe.utcnow", lambda: env.slurm.now().replace(tzinfo=None))
    return env


def test_the_usage_file_is_a_data_chunk_lua_reads_back(tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 24, 9, tzinfo=dt.UTC)
    usage = {
        ("alice", "cv", "urgent"): StrictUse(47.5, 1),
        ('ev"il\nname', "cv", "prior"): StrictUse(0.1234, 0),
        ("root", "sys", "urgent"): StrictUse(1, 0),
    }
    path = tmp_path / "hivebatch_usage.lua"
    write_usage(path, usage_lua(usage, now))
    assert path.stat().st_mode & 0o777 == 0o644
    assert lua_read(path, "u.users.alice.cv.urgent.gpu_hours") == "47.5"
    assert lua_read(path, "u.users.alice.cv.urgent.running") == "1"
    assert lua_read(path, 'u.users["ev\\"il\\nname"].cv.prior.gpu_hours') == "0.123"
    assert lua_read(path, "u.written_at") == str(int(now.timestamp()))
    # slurmctld names an updated job's owner by uid only: the file maps the uids this host knows
    assert lua_read(path, "u.uids[0]") == "root"
    assert len(path.read_text().splitlines()) == 2  # a comment and one return line, whatever a name holds


def test_the_usage_file_lives_next_to_slurm_conf_unless_the_config_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_CONF", "/srv/slurm/etc/slurm.conf")
    assert usage_file({}) == Path("/srv/slurm/etc/hivebatch_usage.lua")
    assert usage_file({}, "/out") == Path("/out/hivebatch_usage.lua")
    monkeypatch.delenv("SLURM_CONF")
    assert usage_file({}) == Path("/etc/slurm/hivebatch_usage.lua")
    assert usage_file({"controller": {"usage_file": "/var/lib/hb/u.lua"}}, "/out") == Path(
        "/var/lib/hb/u.lua"
    )
    with pytest.raises(HivebatchError, match="must be an absolute path"):
        usage_file({"controller": {"usage_file": "u.lua"}})


def test_the_site_table_carries_the_limits_and_the_file(env: Env) -> None:
    site = site_table(env.ctx.data, [])
    assert site["user_limits"]["cv"] == {
        "urgent": {"gpu_hours_per_week": 48.0, "running_jobs": 2},
        "prior": {"running_jobs": 1},
    }
    assert site["usage_file"] == str(env.ctx.usage_path)
    assert site["usage_max_age_s"] == 300  # 5 cycles of 1 s would be too eager


def test_a_user_over_the_urgent_limit_is_refused_at_submit_and_may_submit_normal(env: Env) -> None:
    first = env.submit("alice", "cv", 8, qos="urgent")
    env.cycle()
    env.cycle()
    assert env.job(first).state == "running"
    env.slurm.advance(6 * 3600)  # 8 GPUs for 6 hours: 48 GPU-hours, the whole week's budget
    env.cycle()
    assert env.ctx.usage_path is not None
    assert lua_read(env.ctx.usage_path, "u.users.alice.cv.urgent.gpu_hours") == "48"
    with pytest.raises(HivebatchError) as refused:
        env.submit("alice", "cv", 1, qos="urgent")
    assert (
        "sbatch: error: hivebatch: urgent jobs in cv: alice used 48 of 48 GPU-hours in the last 7 days; "
        "submit as prior or normal;"
    ) in str(refused.value)
    # hsub, which submits through sbatch, says the plugin's line rather than sbatch's last one
    assert slurm_refusal(refused.value, "cv", "urgent") == (
        "hivebatch: urgent jobs in cv: alice used 48 of 48 GPU-hours in the last 7 days; submit as prior or normal"
    )
    env.submit("alice", "cv", 1, qos="normal")
    env.submit("bob", "nlp", 1, qos="urgent")


def test_a_job_whose_owner_went_over_the_limit_after_submit_runs_one_class_down(env: Env) -> None:
    # accepted while alice had nothing running; by its turn two urgent jobs of hers hold GPUs
    jobs = [env.submit("alice", "cv", 1, qos="urgent") for _ in range(3)]
    env.cycle()
    classes = [env.job(j).qos for j in jobs]
    assert classes == ["urgent", "urgent", "prior"]
    third = env.job(jobs[2])
    assert third.state == "placed" and third.priority == 1
    assert third.reason == "runs as prior: urgent limit in cv: alice has 2 of 2 urgent jobs holding GPUs"
    (placed,) = env.events(jobs[2], kind="placed")
    assert placed.message.endswith("; " + third.reason)  # the audit trail keeps why after it starts
    path = env.ctx.usage_path
    assert path is not None
    assert lua_read(path, "u.users.alice.cv.urgent.running") == "2"
    assert lua_read(path, "u.users.alice.cv.prior.running") == "1"


def test_an_unwritable_usage_file_is_logged_and_the_cycle_goes_on(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env.ctx.usage_path = tmp_path / "missing-dir" / "usage.lua"
    env.submit("alice", "cv", 1, qos="urgent")
    with caplog.at_level(logging.WARNING, logger="hivebatch.controller"):
        report = env.cycle()
    assert report.ok and report.placed == 1
    assert "cannot write the usage file" in caplog.text


def test_a_job_the_owner_moved_to_another_class_is_placed_and_kept_in_that_class(env: Env) -> None:
    jid = env.submit("alice", "cv", 1, qos="normal", extra=["--hold"])
    env.cycle()
    assert env.job(jid).state == "queued"  # held by its owner
    alice = env.slurm.as_user("alice")
    alice.set_qos(jid, "prior")  # scontrol update QOS=prior while it waits
    alice.release(jid)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert (job.state, job.qos, job.priority, job.reason) == ("placed", "prior", 1, None)


def test_hsub_says_the_refusal_line_recorded_on_the_lab(slurm_fixture: Callable[[str], str]) -> None:
    stderr = slurm_fixture("err_submit_over_user_limit.txt").rsplit("rc=", 1)[0]
    refusal = slurm_refusal(SlurmError(["sbatch"], 1, stderr), "cv", "urgent")
    assert refusal == stderr.splitlines()[0].removeprefix("sbatch: error: ")
    assert refusal.startswith("hivebatch: urgent jobs in cv: alice used 52 of 48 GPU-hours")
