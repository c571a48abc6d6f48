"""Running a command as a lab user the way a student on a real cluster would: no SLURM_CONF (Slurm
finds the lab's config where it looks by default) and none of the test process's Python environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def user_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "PYTHONPATH", "VIRTUAL_ENV")}


def run_as(
    user: str, argv: list[str], timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True, env=user_env(),
                          timeout=timeout, check=False, cwd=cwd)  # fmt: skip


def popen_as(user: str, argv: list[str], cwd: Path | None = None) -> subprocess.Popen[str]:
    """A client that waits for its allocation (srun, salloc, a workflow tool), started in the background."""
    return subprocess.Popen(["runuser", "-u", user, "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=user_env(), cwd=cwd)  # fmt: skip
