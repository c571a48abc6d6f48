"""sbatch run attached to the user's terminal, for the options whose output is sbatch's own.

``sbatch --wait`` prints the job id, then waits for the job and exits with its exit code; ``sbatch -Q``
prints nothing on success. Both are sbatch's to show: its standard output is the caller's own (the id
appears when sbatch prints it, however long the job then runs), and its standard error is handed on
line by line as it comes (recorded: tests/fixtures/slurm/sbatch_quiet_wait.txt).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

from hivebatch.slurm.types import SlurmError


def sbatch_attached(script_text: str, args: Sequence[str], told: Callable[[str], None]) -> int:
    """``sbatch ARGS`` with the script on its standard input and this process's standard output;
    ``told`` gets each line sbatch writes on standard error. Returns sbatch's exit code (with --wait,
    the job's, as sbatch gives it). No time limit: the job may run for days."""
    if not script_text.startswith("#!"):
        raise SlurmError(["sbatch"], 1, "the batch script must start with a #! line")
    argv = ["sbatch", *args]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise SlurmError(argv, 127, "sbatch: command not found (is slurm-client installed?)") from None
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(script_text.encode("utf-8", "surrogateescape"))  # the bytes the user wrote
        proc.stdin.close()
    except BrokenPipeError:
        pass  # sbatch refused before reading it: its words follow on standard error
    for line in proc.stderr:
        told(line.decode("utf-8", "replace").rstrip("\n"))
    return proc.wait()
