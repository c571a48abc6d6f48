"""What the reports need from the config: each VC's cells and GPUs, each node's GPUs and cell levels.

Cell-type arithmetic (how many GPUs a cell type holds, which levels a node splits into) is read
straight from ``cluster.cell_types``; node names and GPU indices come from the cell core's parser
when it is installed, so both agree on the tree order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hivebatch.errors import ConfigError
from hivebatch.reports.gpumap import NodeLayout
from hivebatch.reports.rows import VCInfo


def _cell_types(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = data.get("cluster") or {}
    types = cluster.get("cell_types") if isinstance(cluster, Mapping) else None
    if not isinstance(types, Mapping) or not types:
        raise ConfigError("cluster.cell_types is missing: the config must describe the cell types")
    return {str(k): dict(v or {}) for k, v in types.items()}


def chain_down(types: Mapping[str, Mapping[str, Any]], cell_type: str) -> list[tuple[str, int]]:
    """``[(type, GPUs it holds), …]`` from ``cell_type`` down to its leaf GPU model, leaf last."""
    names: list[str] = []
    current = cell_type
    # A leaf (GPU model) may be listed in cell_types too (e.g. with its memory), but has no child.
    while current in types and types[current].get("child") and current not in names:
        names.append(current)
        current = str(types[current]["child"])
    gpus = 1
    sizes: list[tuple[str, int]] = [(current, 1)]
    for name in reversed(names):
        gpus *= int(types[name].get("count", 1))
        sizes.append((name, gpus))
    return list(reversed(sizes))


def cell_gpus(types: Mapping[str, Mapping[str, Any]], cell_type: str) -> int:
    return chain_down(types, cell_type)[0][1]


def vc_infos(data: Mapping[str, Any]) -> list[VCInfo]:
    types = _cell_types(data)
    vcs = data.get("virtual_clusters") or {}
    if not isinstance(vcs, Mapping):
        raise ConfigError("virtual_clusters must map each VC name to {cells: {CELL_TYPE: COUNT}}")
    out: list[VCInfo] = []
    for name, body in vcs.items():
        cells = (body or {}).get("cells") or {}
        if not isinstance(cells, Mapping):
            raise ConfigError(f"virtual_clusters.{name}.cells must map cell types to counts")
        counts = {str(t): int(n) for t, n in cells.items()}
        unknown = [t for t in counts if t not in types]
        if unknown:
            raise ConfigError(
                f"virtual_clusters.{name}: unknown cell type {unknown[0]!r} (not in cluster.cell_types)"
            )
        out.append(VCInfo(str(name), counts, sum(cell_gpus(types, t) * n for t, n in counts.items())))
    return out


def _node_types(data: Mapping[str, Any], types: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """node name -> its node-level cell type, read from cluster.physical_cells."""
    out: dict[str, str] = {}
    cells = (data.get("cluster") or {}).get("physical_cells") or []
    for cell in cells:
        if not isinstance(cell, Mapping):
            continue
        current = str(cell.get("type"))
        while current in types and not types[current].get("node") and types[current].get("child"):
            current = str(types[current]["child"])
        for node in cell.get("nodes") or []:
            out[str(node)] = current
    return out


def node_layouts(data: Mapping[str, Any]) -> list[NodeLayout]:
    types = _cell_types(data)
    node_type = _node_types(data, types)
    try:
        from hivebatch.cells import parse_cluster_config
    except ImportError:
        parse_cluster_config = None  # type: ignore[assignment]
    layouts: list[NodeLayout] = []
    if parse_cluster_config is not None:
        spec = parse_cluster_config(dict(data))
        for node in spec.nodes:
            levels = _levels(types, node_type.get(node.name))
            layouts.append(NodeLayout(node.name, node.gpu_type, list(node.gpu_indices), levels))
        return layouts
    for name, ntype in node_type.items():
        levels = _levels(types, ntype)
        size = levels[-1][1] if levels else 1
        leaf = levels[0][0] if levels else None
        layouts.append(NodeLayout(name, leaf, list(range(size)), levels))
    return layouts


def _levels(types: Mapping[str, Mapping[str, Any]], node_type: str | None) -> list[tuple[str, int]]:
    if node_type is None:
        return []
    return list(reversed(chain_down(types, node_type)))


def gpus_per_node(layouts: list[NodeLayout]) -> dict[str, int]:
    out: dict[str, int] = {}
    for layout in layouts:
        key = layout.gpu_type or ""
        out[key] = max(out.get(key, 0), len(layout.gpu_indices))
    return out
