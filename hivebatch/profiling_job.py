"""A profiling job's run directory and its wait: ``hadmin profile run`` besides parsing and printing.

The run directory holds a frozen copy of the user's script (the measured code is the code that was
asked for), the batch script, and ``run.json`` naming what is measured and where the profile goes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from hivebatch.errors import HivebatchError
from hivebatch.qos.profiling import command_for, job_script
from hivebatch.slurm.base import SlurmBackend

ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` in one step, so a reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def make_run_dir(parent: Path, model: str) -> Path:
    """A new directory ``parent/MODEL-YYYYmmdd-HHMMSS``; an existing one is an error, never reused."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = (parent / f"{model}-{stamp}").resolve()
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def prepare_run(
    run_dir: Path,
    script: Path,
    interpreter: str | None,
    sizes: list[int],
    iters: int,
    meta: dict[str, Any],
) -> str:
    """Copy ``script`` into ``run_dir``, write run.json and job.sh; returns the batch script's text."""
    copy = run_dir / ("user-script" + script.suffix)
    shutil.copyfile(script, copy)
    copy.chmod(copy.stat().st_mode | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    command = command_for(copy, interpreter, executable=os.access(script, os.X_OK))
    text = job_script(run_dir, command, sizes, iters, meta["model"])
    write_json(run_dir / "run.json", meta)
    (run_dir / "job.sh").write_text(text, encoding="utf-8")
    return text


def wait_for_job(backend: SlurmBackend, job_id: int, timeout: float, poll: float, run_dir: Path) -> str:
    """Poll until the job leaves Slurm's active states; returns its last state ("DONE" once gone)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = backend.list_jobs([job_id])
        state = jobs[0].state if jobs else "DONE"
        if state not in ACTIVE_STATES:
            return state
        if time.monotonic() > deadline:
            raise HivebatchError(
                f"profiling job {job_id} still {state} after {timeout:g} s; collect later with: hadmin profile collect {run_dir}"
            )
        time.sleep(poll)
