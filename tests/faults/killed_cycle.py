"""One controller cycle that kills itself with SIGKILL at a named step (run by the fault suite).

    python killed_cycle.py STEP CONFIG

STEP: observe | reconcile | rebuild | decide | intents | act | after-first-release | record
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
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


def main(step: str, config: str) -> None:
    if step == "after-first-release":
        CliBackend.release = after(CliBackend.release)  # type: ignore[method-assign]
    else:
        setattr(cycle, BEFORE[step], die)
    run_cli(controller, ["run", "--once", "--config", config])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
