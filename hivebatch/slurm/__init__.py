"""The only code in hivebatch that talks to Slurm.

``get_backend()`` picks the implementation: the CLI backend, whose reading of Slurm's output is
checked against the lab, unless ``HIVEBATCH_SLURM_BACKEND=pyslurm`` asks for job actions through
pyslurm (``hivebatch.slurm.pyslurm_backend``). pyslurm is never picked because it happens to import:
a site installing or upgrading it should not change how the controller acts. The in-memory Slurm of
the tests lives in ``hivebatch.testing`` and cannot be chosen here: a controller must never schedule
against an imaginary cluster because of a setting.
"""

from __future__ import annotations

import importlib
import os

from hivebatch.errors import HivebatchError
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import AcctRecord, SlurmError, SlurmJob, SlurmNode

ENV_VAR = "HIVEBATCH_SLURM_BACKEND"
BACKENDS = ("cli", "pyslurm")


def _import_pyslurm() -> object | None:
    try:
        return importlib.import_module("pyslurm")
    except Exception:  # an ImportError, or a pyslurm built for another Slurm failing to load its library
        return None


def get_backend(name: str | None = None) -> SlurmBackend:
    choice = (name or os.environ.get(ENV_VAR) or "").strip().lower()
    if choice and choice not in BACKENDS:
        raise HivebatchError(f"{ENV_VAR}={choice!r} is not a Slurm backend: use one of {', '.join(BACKENDS)}")
    if choice == "pyslurm":
        module = _import_pyslurm()
        if module is not None:
            from hivebatch.slurm.pyslurm_backend import PyslurmBackend

            return PyslurmBackend(module)
        raise HivebatchError(
            "pyslurm cannot be imported (it needs the Slurm release it was built for); "
            f"unset {ENV_VAR} to use Slurm's commands"
        )
    from hivebatch.slurm.cli import CliBackend

    return CliBackend()


__all__ = ["AcctRecord", "SlurmBackend", "SlurmError", "SlurmJob", "SlurmNode", "get_backend", "BACKENDS"]
