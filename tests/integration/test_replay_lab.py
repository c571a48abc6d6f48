"""hivebatch replay on the lab: a tiny slice in both modes, every job run, a row per VC, accounts restored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hivebatch.cli.hivebatch.replay import replay

PROJECT = Path(__file__).resolve().parents[2]

# (seconds after the first arrival, run seconds, GPUs, VC): at speedup 10 the arrivals span 13 s and
# each job runs 3-8 s; nlp gets a 2-node job that has to wait for its own 4-GPU one
SLICE = [
    (0, 60, 8, "cv"),
    (10, 40, 4, "nlp"),
    (20, 80, 16, "nlp"),
    (40, 30, 1, "sys"),
    (60, 50, 4, "cv"),
    (80, 30, 2, "sys"),
    (100, 60, 8, "nlp"),
    (130, 40, 2, "cv"),
]


def _philly(path: Path) -> Path:
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for at, run, gpus, vc in SLICE:
        lines.append(f"2017-10-03 10:{at // 60:02d}:{at % 60:02d},{run},{gpus},{run * gpus},{vc}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _associations() -> str:
    done = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,GrpTRES"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


def test_replay_runs_every_job_in_both_modes(slurm_lab: Any, tmp_path: Path) -> None:
    before = _associations()
    users = [f"--user={vc}={user}" for user, vc in slurm_lab.users.items()]
    args = [
        "--trace", str(_philly(tmp_path / "slice.csv")), "--trace-format", "philly",
        "--config", str(PROJECT / "etc" / "hivebatch.example.yaml"),
        "--hours", "1", "--speedup", "10", "--min-run", "3", "--max-run", "10",
        "--operator", slurm_lab.operator, "--interval", "1", "--timeout", "120", "--json", *users,
    ]  # fmt: skip
    result = CliRunner().invoke(replay, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for mode in ("plain", "hivebatch"):
        real = report["modes"][mode]["slurm"]
        assert (real["completed"], real["jobs"]) == (len(SLICE), len(SLICE)), (mode, real)
        assert set(real["vcs"]) == {"cv", "nlp", "sys"}
        assert all("excess_queue_s" in e for e in real["vcs"].values())
    assert set(report["vcs"]) == {"cv", "nlp", "sys"}
    # plain mode's temporary accounts and the Operator's associations with them are gone
    assert _associations() == before
    assert "hbreplay_" not in before
