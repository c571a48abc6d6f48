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

from typing import Any

from hivebatch.slurm.cli import CliBackend, Runner
from hivebatch.slurm.types import SlurmError


class PyslurmBackend(CliBackend):
    name = "pyslurm"

    def __init__(self, module: Any, runner: Runner | None = None) -> None:
        super().__init__(runner)
        self._ps = module

    def _act(self, job_id: int, what: str, *args: Any, **kwargs: Any) -> None:
        try:
            getattr(self._ps.Job(int(job_id)), what)(*args, **kwargs)
        except Exception as exc:  # pyslurm raises its own RPCError with Slurm's message
            raise SlurmError(
                ["pyslurm", f"Job.{what}", str(job_id)], getattr(exc, "errno", 1) or 1, str(exc)
            ) from None

    def _array_task(self, job_id: int) -> bool:
        return int(job_id) in self._task_names

    def release(self, job_id: int) -> None:
        if self._array_task(job_id):
            return super().release(job_id)
        self._act(job_id, "release")

    def hold(self, job_id: int) -> None:
        if self._array_task(job_id):
            return super().hold(job_id)
        self._act(job_id, "hold")

    def requeue_hold(self, job_id: int) -> None:
        if self._array_task(job_id):
            return super().requeue_hold(job_id)
        self._act(job_id, "requeue", hold=True)

    def cancel(self, job_id: int) -> None:
        if self._array_task(job_id):
            return super().cancel(job_id)
        self._act(job_id, "cancel")

    def signal(self, job_id: int, signal: str, target: str) -> None:
        if self._array_task(job_id):
            return super().signal(job_id, signal, target)
        # pyslurm's Job.send_signal names scancel's three targets batch, children and all
        steps = {"batch": "batch", "steps": "children", "all": "all"}[target]
        self._act(job_id, "send_signal", signal, steps=steps)

    def notify(self, job_id: int, message: str) -> None:
        if self._array_task(job_id):
            return super().notify(job_id, message)
        self._act(job_id, "notify", message)
