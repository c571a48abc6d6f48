"""Backend whose job actions go through pyslurm's RPCs, chosen only by name
(``HIVEBATCH_SLURM_BACKEND=pyslurm``).

pyslurm on PyPI is built against one Slurm release (25.11 for the current one); Debian bookworm ships
Slurm 22.05, so the lab cannot load it. Submission keeps going through ``sbatch`` (hivebatch passes
sbatch options through unchanged), and jobs and nodes are read as the CLI backend reads them
(``squeue --json``, ``sinfo --json``), whose parsing is checked against the lab's recorded output:
pyslurm's objects expose the same records under other names and units (a dependency as a parsed dict
without its ``(unfulfilled)`` state, GRES as dicts), and a mapping that cannot be checked against a
live Slurm would leave the controller blind to what it decides on. What pyslurm replaces are the
actions: release, hold, requeue, cancel, signal and notify, as one RPC each instead of a command,
except on an array task, which goes through the CLI backend: Slurm reads a bare array job id as every
task of the array, and the CLI backend names a task by its index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hivebatch.slurm.cli import CliBackend, Runner
from hivebatch.slurm.types import SlurmError


class PyslurmBackend(CliBackend):
    name = "pyslurm"

    def __init__(self, module: Any, runner: Runner | None = None) -> None:
        super().__init__(runner)
        self._ps = module

    def _act(self, job_id: int, cli: Callable[[], None], what: str, *args: Any, **kwargs: Any) -> None:
        """pyslurm's ``Job.<what>``; on an array task ``cli``, the CLI backend's own action, which names
        the task by its index (Slurm reads a bare array job id as every task of the array)."""
        if int(job_id) in self._task_names:
            cli()
            return
        try:
            getattr(self._ps.Job(int(job_id)), what)(*args, **kwargs)
        except Exception as exc:  # pyslurm raises its own RPCError with Slurm's message
            raise SlurmError(
                ["pyslurm", f"Job.{what}", str(job_id)], getattr(exc, "errno", 1) or 1, str(exc)
            ) from None

    def release(self, job_id: int) -> None:
        self._act(job_id, lambda: CliBackend.release(self, job_id), "release")

    def hold(self, job_id: int) -> None:
        self._act(job_id, lambda: CliBackend.hold(self, job_id), "hold")

    def requeue_hold(self, job_id: int) -> None:
        self._act(job_id, lambda: CliBackend.requeue_hold(self, job_id), "requeue", hold=True)

    def cancel(self, job_id: int) -> None:
        self._act(job_id, lambda: CliBackend.cancel(self, job_id), "cancel")

    def signal(self, job_id: int, signal: str, target: str) -> None:
        # pyslurm's Job.send_signal names scancel's three targets batch, children and all
        steps = {"batch": "batch", "steps": "children", "all": "all"}[target]
        self._act(
            job_id,
            lambda: CliBackend.signal(self, job_id, signal, target),
            "send_signal",
            signal,
            steps=steps,
        )

    def notify(self, job_id: int, message: str) -> None:
        self._act(job_id, lambda: CliBackend.notify(self, job_id, message), "notify", message)
