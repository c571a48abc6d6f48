"""Scenario files: a cluster+VC config and a list of steps run through the cell core.

The output (one JSON object per step) is the contract of ``hivebatch cells replay``; see
design/cells.md. Steps are validated before any of them runs, so a malformed file prints nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hivebatch.cells.allocator import CellAllocator
from hivebatch.cells.config import parse_cluster_config
from hivebatch.cells.spec import ClusterSpec
from hivebatch.cells.types import Request, UnknownJobError, UnknownNodeError
from hivebatch.errors import ConfigError

OPS = ("allocate", "release", "bad_node", "healthy_node")
_ALLOCATE_KEYS = {"job", "vc", "gpus", "nodes", "gpu_type", "within", "priority"}


@dataclass(frozen=True)
class Step:
    op: str
    args: dict[str, Any]


def _int(value: Any, where: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{where} must be a whole number{bound}, got {value!r}")
    return value


def parse_steps(raw: Any) -> list[Step]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(
            "steps: must be a list like [{allocate: {job: j1, vc: vc1, gpus: 4}}, {release: {job: j1}}]"
        )
    steps: list[Step] = []
    for i, entry in enumerate(raw):
        where = f"steps[{i}]"
        if not isinstance(entry, Mapping) or len(entry) != 1:
            raise ConfigError(
                f"{where}: each step is one of {', '.join(OPS)} with its arguments, e.g. {{release: {{job: j1}}}}"
            )
        op, body = next(iter(entry.items()))
        if op not in OPS:
            raise ConfigError(f"{where}: unknown step {op!r} (known: {', '.join(OPS)})")
        if op == "allocate":
            if not isinstance(body, Mapping):
                raise ConfigError(f"{where}: allocate needs {{job: ID, vc: VC, gpus: N}}")
            unknown = set(body) - _ALLOCATE_KEYS
            if unknown:
                raise ConfigError(
                    f"{where}: allocate: unknown key(s) {', '.join(sorted(map(str, unknown)))} (allowed: {', '.join(sorted(_ALLOCATE_KEYS))})"
                )
            for key in ("job", "vc", "gpus"):
                if key not in body:
                    raise ConfigError(f"{where}: allocate needs {key}")
            args = {
                "job": str(body["job"]),
                "vc": str(body["vc"]),
                "gpus": _int(body["gpus"], f"{where}: gpus"),
                "nodes": None if body.get("nodes") is None else _int(body["nodes"], f"{where}: nodes"),
                "gpu_type": None if body.get("gpu_type") is None else str(body["gpu_type"]),
                "within": None if body.get("within") is None else str(body["within"]),
                "priority": _int(body.get("priority", 0), f"{where}: priority"),
            }
        elif op == "release":
            job = body.get("job") if isinstance(body, Mapping) else body
            if job is None or isinstance(job, Mapping | list):
                raise ConfigError(f"{where}: release needs {{job: ID}}")
            args = {"job": str(job)}
        else:
            node = body.get("node") if isinstance(body, Mapping) else body
            if node is None or isinstance(node, Mapping | list):
                raise ConfigError(f"{where}: {op} needs a node name, e.g. {op}: node2")
            args = {"node": str(node)}
        steps.append(Step(op, args))
    return steps


def load_scenario(data: Mapping[str, Any]) -> tuple[ClusterSpec, list[Step]]:
    """Parse config and steps; raises ConfigError (InfeasibleConfigError for an infeasible layout)."""
    unknown = set(data) - {
        "cluster",
        "virtual_clusters",
        "steps",
        "database",
        "qos",
        "controller",
        "sharing",
        "description",
    }
    if unknown:
        raise ConfigError(f"scenario: unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}")
    steps = parse_steps(data.get("steps"))
    spec = parse_cluster_config(data)
    return spec, steps


def run_steps(alloc: CellAllocator, steps: list[Step]) -> Iterator[dict[str, Any]]:
    for i, st in enumerate(steps):
        out: dict[str, Any] = {"step": i, "op": st.op}
        if st.op == "allocate":
            a = st.args
            out["job"] = a["job"]
            d = alloc.allocate(
                Request(
                    job_id=a["job"],
                    vc=a["vc"],
                    gpus=a["gpus"],
                    nodes=a["nodes"],
                    gpu_type=a["gpu_type"],
                    within=a["within"],
                    priority=a["priority"],
                )
            )
            out.update(d.to_json())
        elif st.op == "release":
            out["job"] = st.args["job"]
            try:
                alloc.release(st.args["job"])
                out["result"] = "ok"
            except UnknownJobError as exc:
                out.update(result="rejected", error=str(exc))
        else:
            out["node"] = st.args["node"]
            try:
                if st.op == "bad_node":
                    alloc.set_node_bad(st.args["node"])
                else:
                    alloc.set_node_healthy(st.args["node"])
                out["result"] = "ok"
            except UnknownNodeError as exc:
                out.update(result="rejected", error=str(exc))
        yield out
