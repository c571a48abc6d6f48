"""Checks of a request against the cluster configuration, before anything reaches Slurm.

The cell core is the authority on what a VC can ever hold: an empty allocator answering "rejected"
means the request can never run, whatever else happens on the cluster.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest


def _match_gpu_type(wanted: str, known: list[str]) -> str:
    for name in known:
        if name.lower() == wanted.lower():
            return name
    raise HivebatchError(
        f"unknown GPU type {wanted!r}: this cluster has {', '.join(known) or 'none'} "
        "(hivebatch picks the GPU indices itself)"
    )


def even_placement(
    total: int, nodes: int | None, per_node_max: int, node_room: int
) -> tuple[int | None, int]:
    """(nodes, GPUs) the job_submit plugin turns a GPU ask into: every node of a job gets the same GPUs,
    so a total no node count within reach splits evenly runs on the smallest such placement holding
    it, fewest nodes on a tie (the plugin's ``round_up``, which tells the user). Otherwise unchanged."""
    low = nodes or max(1, -(-total // per_node_max))
    high = nodes or max(low, node_room)
    options = [(n * -(-total // n), n) for n in range(low, high + 1) if -(-total // n) <= per_node_max]
    if not options:
        return nodes, total
    gpus, n = min(options)
    if gpus == total and nodes is None:
        return None, total  # an exact split: the shape stays open
    return n, gpus


def _reach(spec: Any, req: JobRequest, gpu_type: str | None) -> tuple[int, int]:
    """(GPUs per node, nodes) a job of the request can use, as the plugin reckons them: of its GPU type,
    else of the largest node type; nodes its VC's whole-node cells span (any type), or any node for
    opportunistic work."""
    chains = [gpu_type] if gpu_type else list(spec.gpu_types)
    per_node = max(spec.gpus_per_node(c) for c in chains)
    reach = spec.node_reach(None if req.priority < 0 else req.vc, gpu_type)
    return per_node, reach if req.priority < 0 else max(1, reach)


def check_request(
    req: JobRequest, config: dict[str, Any], config_path: Path | None
) -> tuple[JobRequest, list[str], dict[str, str]]:
    """The request with names normalised to the config's spelling, notes for the user, and the
    environment the job gets on top of the user's (a GPU slice's memory limit)."""
    from hivebatch.cells import CellAllocator, Request, parse_cluster_config

    notes: list[str] = []
    spec = parse_cluster_config(config)
    if req.vc not in spec.vcs:
        raise HivebatchError(
            f"unknown virtual cluster {req.vc!r} for -A/--account: this cluster has {', '.join(sorted(spec.vcs))}"
        )
    gpu_type = _match_gpu_type(req.gpu_type, list(spec.gpu_types)) if req.gpu_type else None
    if gpu_type != req.gpu_type:
        req = dataclasses.replace(req, gpu_type=gpu_type)

    of_type = f" {gpu_type}" if gpu_type else ""
    if req.priority >= 0:
        capacity = spec.vc_gpus(req.vc, gpu_type)
        if req.gpus > capacity:
            raise HivebatchError(
                f"virtual cluster {req.vc} holds at most {capacity}{of_type} GPUs; this job asks for {req.gpus} "
                "(ask for fewer, or use -q opportunistic to borrow idle GPUs)"
            )
    else:
        capacity = sum(len(n.gpu_indices) for n in spec.nodes if gpu_type is None or n.gpu_type == gpu_type)
        if req.gpus > capacity:
            raise HivebatchError(f"the cluster has {capacity}{of_type} GPUs; this job asks for {req.gpus}")

    nodes, gpus = even_placement(req.gpus, req.nodes, *_reach(spec, req, gpu_type))
    if gpus != req.gpus:
        assert nodes is not None
        counted = "" if req.priority < 0 else f", counted against {req.vc}"
        notes.append(f"{req.gpus} GPUs run as {gpus // nodes} on each of {nodes} nodes ({gpus} in all{counted}): "
                     "a job gets the same GPUs on every node here")  # fmt: skip
        req = dataclasses.replace(req, gpus=gpus, nodes=nodes, gpus_per_node=gpus // nodes)
    decision = CellAllocator(spec).try_allocate(
        Request(
            job_id="hsub-check",
            vc=req.vc,
            gpus=req.gpus,
            nodes=req.nodes,
            gpu_type=gpu_type,
            within=req.within,
            priority=req.priority,
        )
    )
    if decision.result == "rejected":
        raise HivebatchError(f"this job can never run in virtual cluster {req.vc}: {decision.error}")

    job_env: dict[str, str] = {}
    if req.gpu_mem_mib is not None:
        from hivebatch.sharing.integration import check_submission

        job_env, mem_notes = check_submission(config, spec, req.gpus, req.gpu_mem_mib, gpu_type)
        notes.extend(mem_notes)
    if req.model:
        notes.extend(check_model(req, config, config_path, gpu_type or spec.gpu_types[0]))
    return req, notes, job_env


def check_model(
    req: JobRequest, config: dict[str, Any], config_path: Path | None, gpu_type: str
) -> list[str]:
    from hivebatch.qos import ProfileStore, UnknownModelError, parse_qos_config

    settings = parse_qos_config(config, config_path.resolve().parent if config_path else None)
    store = ProfileStore.load(settings.profiles)
    try:
        _prof, note = store.get(req.model, gpu_type=gpu_type, like=req.like)
    except UnknownModelError as exc:
        hint = (
            ""
            if req.like or "--like" in str(exc)
            else " (give --like KNOWN_MODEL to borrow a similar model's profile)"
        )
        raise HivebatchError(f"{exc}{hint}") from None
    return [note] if note else []


def interpret_shape(values: dict[str, str | bool]) -> tuple[dict[str, str | bool], list[str]]:
    """sbatch's ways of asking for GPUs and nodes, in the terms the request is built from.

    ``-N MIN-MAX`` pins the node count at MIN when MIN = MAX or MIN > 1, as the job_submit plugin
    does (a placement has one node count; ``-N 1-MAX`` leaves it to the placement);
    ``--gpus-per-task=K`` asks for K GPUs per task (``-n``, or ``--ntasks-per-node`` × ``-N``; one task
    by default). Options sbatch alone acts on
    (``--exclusive``, ``--mem-per-gpu``, ``--cpus-per-gpu``) change nothing here. Returns the values
    and the problems found.
    """
    out = dict(values)
    problems: list[str] = []
    nodes = out.get("nodes")
    if isinstance(nodes, str) and "-" in nodes:
        low, _, high = nodes.partition("-")
        if not (low.strip().isdigit() and high.strip().isdigit()):
            problems.append(f"-N/--nodes {nodes!r}: give a count or MIN-MAX, e.g. 2 or 1-2")
        elif int(low) == int(high) or int(low) > 1:
            out["nodes"] = low.strip()
        else:
            del out["nodes"]
    per_task = out.get("gpus_per_task")
    if per_task is not None and out.get("gpus") is None:
        kind, _, count = str(per_task).rpartition(":")
        tasks = _task_count(out)
        if not count.isdigit():
            problems.append(f"--gpus-per-task {per_task!r}: give [TYPE:]N, e.g. 2 or V100:2")
        elif tasks is None:
            problems.append("--gpus-per-task: -n/--ntasks (or --ntasks-per-node) must be a whole number")
        else:
            out["gpus"] = f"{kind}:{int(count) * tasks}" if kind else str(int(count) * tasks)
    return out, problems


def _task_count(values: dict[str, str | bool]) -> int | None:
    raw = values.get("ntasks")
    if raw is not None:
        return int(str(raw)) if str(raw).isdigit() else None
    per_node, nodes = values.get("ntasks_per_node"), values.get("nodes")
    if per_node is None:
        return 1
    if not str(per_node).isdigit() or not str(nodes or "1").isdigit():
        return None
    return int(str(per_node)) * int(str(nodes or "1"))
