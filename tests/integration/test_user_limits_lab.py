"""Per-user limits on the strict classes on the real lab: slurmctld's job_submit.lua, rendered with limits,
reads the usage file the controller's writer makes from a ledger, and refuses alice's urgent job with one
line while her normal job (and bob's urgent one) go through; moving a waiting job to urgent is refused too.

The clients run as the lab users without SLURM_CONF, like the other enforcement tests (test_enforcement.py).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_users import run_as
from sqlalchemy.orm import Session

from hivebatch.controller.usage import usage_lua, write_usage
from hivebatch.db import Base, Job, make_engine
from hivebatch.jobsubmit import USAGE_FILE, job_submit_lua
from hivebatch.reports.source import ledger_strict_usage

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
LIMITS = {"urgent": {"gpu_hours_per_week": 48, "running_jobs": 2}}
REFUSAL = (
    "sbatch: error: hivebatch: urgent jobs in cv: alice used 52 of 48 GPU-hours in the last 7 days; "
    "submit as prior or normal"
)


def _replace(path: Path, text: str) -> None:
    """Write the plugin with a later modification time than it had: slurmctld reloads it only then."""
    before = int(path.stat().st_mtime)
    write_usage(path, text)  # the same write-then-rename the usage file gets
    stamp = max(int(time.time()), before + 1)
    os.utime(path, (stamp, stamp))


@pytest.fixture
def limited_lab(slurm_lab: Any) -> Iterator[Path]:
    """The lab's plugin rendered with LIMITS for this test (the usage file in slurm.conf's directory);
    the original plugin is put back and the usage file removed afterwards, whatever happened."""
    etc = slurm_lab.conf.parent
    plugin = etc / "job_submit.lua"
    original = plugin.read_text()
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    data["user_limits"] = LIMITS
    _replace(plugin, job_submit_lua(data, [slurm_lab.operator], etc))
    try:
        yield etc / USAGE_FILE
    finally:
        _replace(plugin, original)
        (etc / USAGE_FILE).unlink(missing_ok=True)


def _write_usage_from_a_ledger(path: Path, tmp_path: Path) -> None:
    """alice ran an urgent 8-GPU job for 6.5 hours yesterday: 52 GPU-hours, over her 48."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    end = now - dt.timedelta(days=1)
    engine = make_engine(f"sqlite:///{tmp_path / 'hb.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(
            Job(
                slurm_job_id=990001, user="alice", account="cv", vc_name="cv", qos="urgent", priority=2,
                foreign=False, request={"vc": "cv", "qos": "urgent", "gpus": 8}, gpus=8, state="done",
                submit_time=end - dt.timedelta(hours=7), start_time=end - dt.timedelta(hours=6.5),
                end_time=end, created_at=end, gpu_hours_guaranteed=52.0,
            )
        )  # fmt: skip
        session.commit()
        write_usage(path, usage_lua(ledger_strict_usage(session, now), now))
    engine.dispose()


def _sbatch(user: str, *opts: str) -> Any:
    return run_as(user, ["sbatch", "--parsable", "-o", "/dev/null", *opts, "--wrap", "sleep 60"], timeout=60)


def test_over_the_urgent_limit_plain_sbatch_is_refused_with_one_line_and_normal_goes_through(
    slurm_lab: Any, lab_jobs: list[int], limited_lab: Path, tmp_path: Path
) -> None:
    # no usage file yet: the limits are not checked at submit (fail open), the controller checks them
    first = _sbatch("alice", "-q", "urgent", "--gres=gpu:1")
    assert first.returncode == 0, first.stderr
    lab_jobs.append(int(first.stdout.strip().split(";")[0]))

    _write_usage_from_a_ledger(limited_lab, tmp_path)
    refused = _sbatch("alice", "-q", "urgent", "--gres=gpu:1")
    assert refused.returncode != 0
    assert refused.stderr.splitlines()[0] == REFUSAL, refused.stderr

    for user, qos in (("alice", "normal"), ("alice", "prior"), ("bob", "urgent")):
        out = _sbatch(user, "-q", qos, "--gres=gpu:1")
        assert out.returncode == 0, f"{user} {qos}: {out.stderr}"
        jid = int(out.stdout.strip().split(";")[0])
        lab_jobs.append(jid)
        assert slurm_lab.wait_for(jid, {"PENDING"}, held=True).qos == qos

    # alice moving her waiting normal job to urgent meets the same limit (22.05 says only "denied")
    normal = lab_jobs[1]
    moved = run_as("alice", ["scontrol", "update", f"JobId={normal}", "QOS=urgent"], timeout=60)
    assert moved.returncode != 0 and "Access/permission denied" in moved.stderr, moved.stderr
    assert slurm_lab.backend().list_jobs([normal])[0].qos == "normal"
