"""One controller cycle with a fault injected at a named step (run by the fault suite).

    python killed_cycle.py STEP CONFIG

STEP: observe | reconcile | rebuild | decide | intents | act | after-first-release | record — the
controller kills itself with SIGKILL there; ctld-bounce — slurmctld is stopped just before the
cycle's first placement and started again before its third, so the cycle acts through an outage.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hivebatch.controller.cycle as cycle
from hivebatch.cli.common import run_cli
from hivebatch.cli.hivebatch.controller import controller
from hivebatch.slurm.cli import CliBackend

BEFORE = {
    "observe": "observe",
    "reconcile": "sync_jobs",
    "rebuild": "rebuild_allocator",
    "decide": "decide",
    "intents": "write_intents",
    "act": "act",
    "record": "_record",
}


def die(*_args: Any, **_kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def after(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        die()

    return call


def bounce(original: Callable[..., Any]) -> Callable[..., Any]:
    calls = [0]

    def call(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            slurmctld("stop")
        elif calls[0] == 3:
            slurmctld("start")
        return original(*args, **kwargs)

    return call


def slurmctld(what: str) -> None:
    pid_file = Path(os.environ["SLURM_CONF"]).resolve().parents[1] / "run" / "slurmctld.pid"
    if what == "stop":
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGTERM)
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        return
    # the daemon must not keep this process's output pipes open: the suite reads them to the end
    subprocess.run(["slurmctld", "-i"], check=True, timeout=30, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while subprocess.run(["scontrol", "ping"], capture_output=True, check=False).returncode != 0:
        time.sleep(0.2)


def main(step: str, config: str) -> None:
    if step == "ctld-bounce":
        CliBackend.update_pending = bounce(CliBackend.update_pending)  # type: ignore[method-assign]
    elif step == "after-first-release":
        CliBackend.release = after(CliBackend.release)  # type: ignore[method-assign]
    else:
        setattr(cycle, BEFORE[step], die)
    run_cli(controller, ["run", "--once", "--config", config])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
