"""Backend over pyslurm, used when ``import pyslurm`` works.

pyslurm on PyPI is built against one Slurm release (25.11 for the current one); Debian bookworm ships
Slurm 22.05, so on the lab this backend never loads and the CLI backend is used. Submission keeps going
through ``sbatch`` (hivebatch passes sbatch options through unchanged); queries and job actions use
pyslurm's objects, read defensively because its attribute names follow Slurm's releases.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hivebatch.slurm.cli import CliBackend
from hivebatch.slurm.parse import expand_hostlist, gpus_in_detail, typed_request
from hivebatch.slurm.types import (
    BAD_NODE_WORDS,
    FINISHED_STATES,
    HELD_REASONS,
    SlurmError,
    SlurmJob,
    SlurmNode,
)


def _dt(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return datetime.fromtimestamp(n, tz=UTC) if n > 0 else None


class PyslurmBackend(CliBackend):
    name = "pyslurm"

    def __init__(self, module: Any) -> None:
        super().__init__()
        self._ps = module

    def _act(self, job_id: int, what: str, *args: Any, **kwargs: Any) -> None:
        try:
            getattr(self._ps.Job(int(job_id)), what)(*args, **kwargs)
        except Exception as exc:  # pyslurm raises its own RPCError with Slurm's message
            raise SlurmError(
                ["pyslurm", f"Job.{what}", str(job_id)], getattr(exc, "errno", 1) or 1, str(exc)
            ) from None

    def release(self, job_id: int) -> None:
        self._act(job_id, "release")

    def hold(self, job_id: int) -> None:
        self._act(job_id, "hold")

    def requeue_hold(self, job_id: int) -> None:
        self._act(job_id, "requeue", hold=True)

    def cancel(self, job_id: int) -> None:
        self._act(job_id, "cancel")

    def signal(self, job_id: int, signal: str, target: str) -> None:
        # pyslurm's Job.send_signal names scancel's three targets batch, children and all
        steps = {"batch": "batch", "steps": "children", "all": "all"}[target]
        self._act(job_id, "send_signal", signal, steps=steps)

    def notify(self, job_id: int, message: str) -> None:
        self._act(job_id, "notify", message)

    def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
        try:
            loaded = self._ps.Jobs.load()
        except Exception as exc:
            raise SlurmError(["pyslurm", "Jobs.load"], 1, str(exc)) from None
        jobs = [job_from_pyslurm(j) for j in (loaded.values() if hasattr(loaded, "values") else loaded)]
        if job_ids is not None:
            wanted = {int(x) for x in job_ids}
            jobs = [j for j in jobs if j.job_id in wanted]
        return jobs

    def list_nodes(self) -> list[SlurmNode]:
        try:
            loaded = self._ps.Nodes.load()
        except Exception as exc:
            raise SlurmError(["pyslurm", "Nodes.load"], 1, str(exc)) from None
        return [node_from_pyslurm(n) for n in (loaded.values() if hasattr(loaded, "values") else loaded)]


def job_from_pyslurm(j: Any) -> SlurmJob:
    state = str(getattr(j, "state", "UNKNOWN") or "UNKNOWN").upper()
    reason = str(getattr(j, "state_reason", None) or "None")
    nodes = expand_hostlist(getattr(j, "nodes", None) or "") if state != "PENDING" else []
    gpus: dict[str, list[int]] = {}
    shards: dict[str, dict[int, int]] = {}
    layout: dict[str, Any] = {}
    if hasattr(j, "get_resource_layout_per_node") and state == "RUNNING":
        try:
            layout = j.get_resource_layout_per_node() or {}
        except Exception:
            layout = {}
    for node, res in layout.items():
        for key, info in (res.get("gres") or {}).items():
            detail = f"{key}:{info.get('count', 1)}(IDX:{info.get('indexes', '')})"
            g, s = gpus_in_detail(detail)
            if g:
                gpus.setdefault(node, []).extend(g)
            if s:
                shards.setdefault(node, {}).update(s)
    if not layout and nodes:
        per_node = getattr(j, "gres_per_node", None) or {}
        text = ",".join(f"gres:{k}:{v}" for k, v in per_node.items()) if isinstance(per_node, dict) else ""
        g, s = typed_request(text)
        gpus = {n: list(g) for n in nodes} if g else {}
        shards = {n: dict(s) for n in nodes} if s else {}
    limit = getattr(j, "time_limit", None)
    time_min = getattr(j, "time_limit_min", None)  # minutes, as squeue's time_minimum
    finished = state in FINISHED_STATES
    exit_code = getattr(j, "exit_code", None)
    return SlurmJob(
        job_id=int(getattr(j, "id", 0) or getattr(j, "job_id", 0)),
        name=str(getattr(j, "name", "") or ""),
        user=str(getattr(j, "user_name", "") or ""),
        account=str(getattr(j, "account", "") or ""),
        qos=str(getattr(j, "qos", "") or ""),
        state=state,
        reason=reason,
        nodes=nodes,
        gpus={k: sorted(v) for k, v in gpus.items()},
        shards=shards,
        comment=str(getattr(j, "comment", "") or ""),
        submit_time=_dt(getattr(j, "submit_time", None)),
        start_time=_dt(getattr(j, "start_time", None)) if state != "PENDING" else None,
        end_time=_dt(getattr(j, "end_time", None)) if finished else None,
        time_limit_s=int(limit) * 60 if isinstance(limit, int) and limit > 0 else None,
        time_min_s=time_min * 60 if isinstance(time_min, int) and time_min > 0 else None,
        deadline=_dt(getattr(j, "deadline", None)),
        num_nodes=int(getattr(j, "num_nodes", 1) or 1),
        held=state == "PENDING" and reason in HELD_REASONS,
        exit_code=f"{exit_code}:0" if finished and exit_code is not None else None,
        required_nodes=expand_hostlist(getattr(j, "required_nodes", None) or ""),
        partition=str(getattr(j, "partition", "") or ""),
        priority=int(getattr(j, "priority", 0) or 0),
        batch=bool(getattr(j, "is_batch_job", True)),
        array_job_id=_int_or_none(getattr(j, "array_id", None)),
        array_task_id=_int_or_none(getattr(j, "array_task_id", None)),
        array_pending=str(getattr(j, "array_tasks_waiting", "") or ""),
        array_max_tasks=_int_or_none(getattr(j, "array_max_parallel_tasks", None)) or 0,
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def node_from_pyslurm(n: Any) -> SlurmNode:
    state = str(getattr(n, "state", "UNKNOWN") or "UNKNOWN").upper()
    words = state.replace("+", " ").split()
    configured = getattr(n, "configured_gres", None) or {}
    alloc = getattr(n, "allocated_gres", None) or {}
    indices = sorted(
        int(k.split(":")[1][1:])
        for k in configured
        if k.startswith("gpu:g") and k.split(":")[1][1:].isdigit()
    )
    used = sorted(
        int(k.split(":")[1][1:])
        for k, v in alloc.items()
        if k.startswith("gpu:g") and k.split(":")[1][1:].isdigit() and v
    )
    return SlurmNode(
        name=str(getattr(n, "name", "")),
        state=state,
        bad=any(w in BAD_NODE_WORDS for w in words),
        gpu_indices=indices,
        gpus_used=used,
        reason=str(getattr(n, "reason", "") or ""),
    )
