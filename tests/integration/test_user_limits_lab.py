"""Per-user limits on the strict classes on the real lab: slurmctld's job_submit.lua, rendered with limits,
reads the usage file the controller's writer makes from a ledger, and refuses alice's urgent job with one
line while her normal job (and bob's urgent one) go through; moving a waiting job to urgent is refused too.

The clients run as the lab users without SLURM_CONF, like the other enforcement tests (test_enforcement.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_limits import limited_plugin, write_usage_from_a_ledger
from lab_users import run_as

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
LIMITS = {"urgent": {"gpu_hours_per_week": 48, "running_jobs": 2}}
REFUSAL = (
    "sbatch: error: hivebatch: urgent jobs in cv: alice used 52 of 48 GPU-hours in the last 7 days; "
    "submit as prior or normal"
)


@pytest.fixture
def limited_lab(slurm_lab: Any) -> Iterator[Path]:
    with limited_plugin(slurm_lab, LIMITS) as usage_file:
        yield usage_file


def _sbatch(user: str, *opts: str) -> Any:
    return run_as(user, ["sbatch", "--parsable", "-o", "/dev/null", *opts, "--wrap", "sleep 60"], timeout=60)


def test_over_the_urgent_limit_plain_sbatch_is_refused_with_one_line_and_normal_goes_through(
    slurm_lab: Any, lab_jobs: list[int], limited_lab: Path, tmp_path: Path
) -> None:
    # no usage file yet: the limits are not checked at submit (fail open), the controller checks them
    first = _sbatch("alice", "-q", "urgent", "--gres=gpu:1")
    assert first.returncode == 0, first.stderr
    lab_jobs.append(int(first.stdout.strip().split(";")[0]))

    write_usage_from_a_ledger(limited_lab, tmp_path)
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
