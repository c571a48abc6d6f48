"""hsub says in one line why Slurm refused a submission, from sbatch's recorded words."""

from __future__ import annotations

from collections.abc import Callable

from hivebatch.cli.hsub.main import slurm_refusal
from hivebatch.slurm.types import SlurmError


def _refusal(stderr: str) -> str:
    return slurm_refusal(SlurmError(["sbatch"], 1, stderr), "cv", "normal")


def test_a_message_sbatch_breaks_over_lines_is_said_whole(slurm_fixture: Callable[[str], str]) -> None:
    # seen on the lab: hsub said only "instead of expected UNIX line breaks (\n)." for a CRLF script
    stderr = slurm_fixture("err_submit_dos_line_breaks.txt").rsplit("rc=", 1)[0]
    assert _refusal(stderr) == (
        r"Slurm refused the job: Batch script contains DOS line breaks (\r\n) instead of expected UNIX line breaks (\n)."
    )


def test_a_one_line_refusal_keeps_slurms_words() -> None:
    stderr = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    assert _refusal(stderr) == (
        "Slurm refused the job: Batch job submission failed: Requested node configuration is not available"
    )


def test_warnings_beside_the_error_are_left_out() -> None:
    stderr = "sbatch: warning: can't honor --ntasks-per-node set to 4\nsbatch: error: Invalid --time specification\n"
    assert _refusal(stderr) == "Slurm refused the job: Invalid --time specification"
