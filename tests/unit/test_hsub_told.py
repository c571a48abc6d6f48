"""hsub shows what sbatch told its user on acceptance, as sbatch does: the job_submit plugin's notes
(recorded from sbatch on the lab: tests/fixtures/slurm/exclusive_user.txt) and sbatch's warnings."""

from __future__ import annotations

from pathlib import Path

import pytest

import hivebatch.slurm
from hivebatch.cli.hsub.main import run
from hivebatch.slurm.cli import CliBackend, Completed

PROJECT = Path(__file__).resolve().parents[2]
ROUNDED = "3 GPUs run as 2 on each of 2 nodes (4 in all, counted against nlp): a job gets the same GPUs on every node here"
USER = "--exclusive=user keeps other users' jobs off the job's nodes, so here it takes them whole, with all their GPUs"


def test_hsub_relays_sbatchs_notes_once_and_its_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    told = f"sbatch: hivebatch: note: {ROUNDED}\nsbatch: hivebatch: note: {USER}\nsbatch: Warning: a warning of sbatch's\n"
    calls: list[list[str]] = []

    def sbatch(argv: list[str], stdin: str | None, env: dict[str, str]) -> Completed:
        calls.append(argv)
        return Completed(0, "105\n", told)

    monkeypatch.setattr(hivebatch.slurm, "get_backend", lambda *a, **k: CliBackend(sbatch))
    config = tmp_path / "hivebatch.yaml"
    config.write_text((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    argv = [
        "--config",
        str(config),
        "-A",
        "nlp",
        "-N",
        "2",
        "--gpus",
        "3",
        "--exclusive=user",
        str(tmp_path / "job.sh"),
    ]
    assert run(argv) == 0
    out, err = capsys.readouterr()
    assert out == "Submitted batch job 105\n" and calls and calls[0][0] == "sbatch"
    # hsub said the rounding before submitting: said once; the plugin's other note and sbatch's warning follow
    assert err.splitlines() == [
        f"hsub: note: {ROUNDED}",
        f"hsub: note: {USER}",
        "sbatch: Warning: a warning of sbatch's",
    ]
