"""Building what a simulation runs on: the cluster spec, the platform the policies plan for, the
profile store, and generated configs for clusters described only by VC sizes (Philly, benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hivebatch.cells import ClusterSpec, parse_cluster_config
from hivebatch.qos import Platform, ProfileStore, QosSettings, parse_qos_config
from hivebatch.sim.engine import BadNode
from hivebatch.sim.runner import Experiment
from hivebatch.sim.runtime import RuntimeModel
from hivebatch.sim.workload import SimJob

# A generic 8-GPU server: 2 sockets x 2 PCIe switches x 2 GPUs (the same tree as the lab nodes).
# The GPU model only selects the profiles behind the slowdown of spread placements.
NODE8_CELL_TYPES: dict[str, Any] = {
    "V100-SWITCH": {"child": "V100", "count": 2},
    "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
    "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
}


def node8_config(vc_nodes: dict[str, int], node_prefix: str = "n") -> dict[str, Any]:
    """A cluster of 8-GPU nodes with exactly the nodes the VCs own; each VC's cells are its nodes."""
    total = sum(vc_nodes.values())
    width = max(4, len(str(total)))
    physical = [{"type": "V100-NODE", "nodes": [f"{node_prefix}{i:0{width}d}"]} for i in range(1, total + 1)]
    return {
        "cluster": {"cell_types": dict(NODE8_CELL_TYPES), "physical_cells": physical},
        "virtual_clusters": {vc: {"cells": {"V100-NODE": n}} for vc, n in vc_nodes.items()},
    }


def single_vc_config(data: dict[str, Any], name: str = "all") -> dict[str, Any]:
    """The same cluster with one VC owning every physical cell: a cluster without tenants."""
    cells: dict[str, int] = {}
    for pc in (data.get("cluster") or {}).get("physical_cells") or []:
        if isinstance(pc, dict) and "type" in pc:
            cells[str(pc["type"])] = cells.get(str(pc["type"]), 0) + 1
    return {**data, "virtual_clusters": {name: {"cells": cells}}}


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent


def paper_config_path() -> Path:
    return project_root() / "etc" / "paper-4x4.yaml"


def build_spec(data: dict[str, Any]) -> ClusterSpec:
    return parse_cluster_config(data)


def build_platform(spec: ClusterSpec, qos: QosSettings) -> Platform:
    """N = the node count and G = the largest GPUs-per-node of the cluster."""
    gpn = max(spec.gpus_per_node(t) for t in spec.gpu_types)
    return Platform(
        max_nodes=len(spec.nodes),
        gpus_per_node=gpn,
        theta=qos.theta,
        overhead_s=qos.startup_overhead_s,
        classes=qos.classes,
        keep_free_gpus=qos.keep_free_gpus,
    )


def build_runtime(spec: ClusterSpec, platform: Platform, qos: QosSettings) -> RuntimeModel:
    store = ProfileStore.load(qos.profiles)
    return RuntimeModel(
        store,
        gpus_per_node=platform.gpus_per_node,
        max_nodes=platform.max_nodes,
        overhead_s=platform.overhead_s,
        gpu_type=spec.gpu_types[0] if spec.gpu_types else None,
    )


def qos_settings(data: dict[str, Any], config_dir: Path | None) -> QosSettings:
    return parse_qos_config(data, config_dir)


def build_experiment(
    spec: ClusterSpec,
    data: dict[str, Any],
    config_dir: Path | None,
    jobs: list[SimJob],
    bad_nodes: list[BadNode],
    private_baseline: bool,
) -> Experiment:
    """The replay of ``jobs`` on ``spec`` with the platform and run times the config's qos: section gives."""
    qos = qos_settings(data, config_dir)
    platform = build_platform(spec, qos)
    runtime = build_runtime(spec, platform, qos)
    return Experiment(spec, jobs, runtime, platform, bad_nodes=bad_nodes, private_baseline=private_baseline)
