"""Upper bounds on every number a user gives hivebatch, checked at submit and again by the controller.

Slurm accepts far more than hivebatch can plan with: on the lab, ``sbatch -t 99999999999999`` is
taken (partition MaxTime UNLIMITED) and squeue shows a limit of 4,285,083,375 minutes, past the last
date Python can represent. Such numbers make the QoS model overflow. Every bound here is far above
any real job, so a real job never meets one; a model hint past one is refused with one line saying
which number to change. A time limit is Slurm's to judge, not a hint: past its bound it is planned
as no limit at all (as ``-t UNLIMITED``), and the job runs under the limit Slurm took.

Request validation calls ``request_problem(req, limits)`` (or ``check_request(req, limits)``, which
raises); the controller calls it for every waiting job, so a request that got past an older ``hsub``
is rejected with the same reason instead of stopping the cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from hivebatch.errors import ConfigError, HivebatchError

if TYPE_CHECKING:
    from hivebatch.request import JobRequest

DAY_S = 86_400


@dataclass(frozen=True)
class Limits:
    """The largest value each request number may take (``limits:`` in the config overrides them)."""

    time_limit_s: int = 365 * DAY_S  # the longest time limit planned with: a longer one is planned as none
    iters: int = 10**12
    batch_size: int = 2**20
    gpus: int = 4096
    nodes: int = 1024
    gpus_per_node: int = 64
    gpu_mem_mib: int = 2**20  # 1 TiB per GPU


DEFAULT_LIMITS = Limits()
# every waiting job's request is checked every cycle; dataclasses.fields() each time cost more than the check
_BOUNDED = tuple(f.name for f in fields(Limits) if f.name != "time_limit_s")

#: how each bounded field is named on the hsub command line, and its unit in messages
_OPTION = {
    "iters": ("--iters", "iterations"),
    "batch_size": ("--batch-size", "samples"),
    "gpus": ("--gpus", "GPUs"),
    "nodes": ("--nodes", "nodes"),
    "gpus_per_node": ("--gpus-per-node", "GPUs per node"),
    "gpu_mem_mib": ("--gpu-mem", "MiB"),
}


def parse_limits(data: Mapping[str, Any]) -> Limits:
    """The config's ``limits:`` section (each key a field of Limits, a positive whole number)."""
    section = data.get("limits") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("limits: must be a mapping, e.g. {time_limit_s: 2592000, iters: 1000000000}")
    known = {f.name for f in fields(Limits)}
    values: dict[str, int] = {}
    for key, value in section.items():
        if key not in known:
            raise ConfigError(f"limits.{key} is unknown: use {', '.join(sorted(known))}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"limits.{key} must be a positive whole number, got {value!r}")
        values[str(key)] = value
    longest = DEFAULT_LIMITS.time_limit_s
    if values.get("time_limit_s", 0) > longest:
        # squeue's limits are read against this bound before any config is (hivebatch.slurm.parse)
        raise ConfigError(
            f"limits.time_limit_s may be at most {longest} (a year), got {values['time_limit_s']}"
        )
    return Limits(**values)


def number_problem(name: str, value: int | None, limit: int) -> str | None:
    """One line when ``value`` is past ``limit``; None when it is within (or absent)."""
    if value is None or value <= limit:
        return None
    option, unit = _OPTION.get(name, (name, ""))
    return f"{option} {value} is more than hivebatch accepts ({limit} {unit}); ask for at most that".replace(
        "  ", " "
    )


def request_problem(req: JobRequest, limits: Limits = DEFAULT_LIMITS) -> str | None:
    """The first number of ``req`` past its bound, in one line; None when all are within."""
    for name in _BOUNDED:
        problem = number_problem(name, getattr(req, name, None), getattr(limits, name))
        if problem:
            return problem
    return None


def check_request(req: JobRequest, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise HivebatchError (one line) when a number of ``req`` is past its bound."""
    problem = request_problem(req, limits)
    if problem:
        raise HivebatchError(problem)


def slurm_time_limit(seconds: int | None, limits: Limits = DEFAULT_LIMITS) -> int | None:
    """A time limit Slurm reports for a job, or None (no usable limit) when it is past the bound:
    Slurm keeps such limits (wrapped around 32 bits), but they say nothing about the job's length."""
    return seconds if seconds is not None and 0 < seconds <= limits.time_limit_s else None
