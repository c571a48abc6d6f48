"""Only jobs Slurm would start now are placed (issue: Slurm's job semantics), on the real lab: a GPU job
waiting for its dependency or its begin time holds no cells until Slurm would start it."""

from __future__ import annotations

import pytest
from lab_controller import Ctl
from lab_users import run_as

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]


def _sbatch(ctl: Ctl, user: str, *opts: str) -> int:
    out = run_as(
        user, ["sbatch", "--parsable", "-o", "/dev/null", "--chdir", str(ctl.jobs_dir), *opts], timeout=60
    )
    assert out.returncode == 0, out.stderr
    jid = int(out.stdout.strip())
    ctl.mine.add(jid)
    return jid


def test_dependency_and_begin_hold_no_cells_until_slurm_would_start_them(ctl: Ctl) -> None:
    first = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-first", "--wrap", "sleep 8")
    after = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-after", "--gres=gpu:2", f"--dependency=afterok:{first}",
                    "--wrap", "true")  # fmt: skip
    later = _sbatch(
        ctl, "alice", "-J", f"{ctl.tag}-later", "--gres=gpu:1", "--begin=now+1hour", "--wrap", "true"
    )
    ctl.cycle()
    ctl.cycle()
    assert ctl.job(after).state == "queued" and not ctl.job(after).placement
    assert ctl.job(after).reason.startswith(f"waits for its dependency afterok:{first}")
    assert ctl.job(later).state == "queued" and ctl.job(later).reason.startswith("waits for its begin time")
    # once the first job has succeeded Slurm would start the dependent one: it is placed and runs
    ctl.lab.wait_for(first, {"COMPLETED"}, timeout_s=60)
    ctl.until(lambda: ctl.job(after).state in ("running", "done"), what=lambda: ctl.job(after).reason)
    assert ctl.job(later).state == "queued" and not ctl.job(later).placement
