"""The ``cluster:`` and ``virtual_clusters:`` sections: cell types, physical cells and VCs.

Everything here is validated once, at load time, so the allocator can trust the shape of the
cluster: every cell type belongs to exactly one chain (leaf GPU model up to the top type), each chain
has exactly one node level, and every physical cell lists exactly the nodes its type spans.
A chain is named after its leaf type, which is also the GPU type jobs ask for.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

# the spec types and the feasibility check moved to spec.py and capacity.py; they are still read from here
from hivebatch.cells.capacity import check_feasibility as check_feasibility
from hivebatch.cells.capacity import physical_counts as physical_counts
from hivebatch.cells.capacity import vc_demand as vc_demand
from hivebatch.cells.spec import CellType, ChainSpec, ClusterSpec, NodeSpec, PhysicalCellSpec, VCSpec
from hivebatch.cells.spec import InfeasibleConfigError as InfeasibleConfigError
from hivebatch.errors import ConfigError

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*$")
_MEMORY_FACTOR = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def parse_memory_mib(value: Any, where: str = "memory") -> int | None:
    """'32G' / '32GiB' / '16384M' / 16384 (MiB) -> MiB."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a size like 32G, got {value!r}")
    if isinstance(value, int | float):
        return int(value)
    m = _MEMORY_RE.match(str(value))
    if not m:
        raise ConfigError(f"{where}: expected a size like 32G or 16384M, got {value!r}")
    return int(float(m.group(1)) * _MEMORY_FACTOR[m.group(2).lower()])


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} must be a positive whole number, got {value!r}")
    return value


def _parse_cell_types(raw: Any) -> tuple[dict[str, CellType], dict[str, ChainSpec]]:
    declared = _declared_types(raw)
    parent_of = _parent_links(declared)
    composite = [n for n, b in declared.items() if b.get("child") is not None]
    leaves = {n for n, b in declared.items() if b.get("child") is None} | {
        str(declared[n]["child"]) for n in composite if str(declared[n]["child"]) not in declared
    }
    # Walk each chain upward from its leaf; whatever composite type is not reached lies on a cycle.
    types: dict[str, CellType] = {}
    chains: dict[str, ChainSpec] = {}
    reached: set[str] = set()
    for leaf in sorted(leaves):
        path = _chain_path(leaf, parent_of)
        reached.update(path)
        node_level = _node_level(leaf, path, declared)
        types.update(_chain_types(leaf, path, node_level, declared))
        gpn = types[path[node_level - 1]].gpus
        chains[leaf] = ChainSpec(
            name=leaf,
            types=tuple(path),
            node_level=node_level,
            gpus_per_node=gpn,
            node_indices=tuple(range(gpn)),
        )
    # chains in config order: by the first declared type that belongs to each chain
    names = list(declared)

    def first_declared(c: ChainSpec) -> int:
        return (
            min(names.index(t) for t in c.types if t in declared)
            if any(t in declared for t in c.types)
            else len(names)
        )

    chains = {c.name: c for c in sorted(chains.values(), key=first_declared)}
    cyclic = set(declared) - reached
    if cyclic:
        start = sorted(cyclic)[0]
        path = [start]
        while str(declared[path[-1]].get("child")) not in path:
            path.append(str(declared[path[-1]]["child"]))
        path.append(str(declared[path[-1]]["child"]))
        raise ConfigError(f"cell types form a cycle: {' -> '.join(path)}")
    return types, chains


def _declared_types(raw: Any) -> dict[str, Mapping[str, Any]]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError("cluster.cell_types must be a mapping of cell type name -> {child: TYPE, count: N}")
    declared: dict[str, Mapping[str, Any]] = {}
    for name, body in raw.items():
        name = str(name)
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise ConfigError(
                f"cell type {name}: expected a mapping like {{child: TYPE, count: N}}, got {body!r}"
            )
        unknown = set(body) - {"child", "count", "node", "memory"}
        if unknown:
            raise ConfigError(
                f"cell type {name}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                f"(allowed: child, count, node, memory)"
            )
        declared[name] = body
    return declared


def _parent_links(declared: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Child type -> its parent type, after checking each type's child and count."""
    explicit_leaves = {n for n, b in declared.items() if b.get("child") is None}
    composite = {n for n, b in declared.items() if b.get("child") is not None}
    # A child that is not declared is a GPU model (leaf), unless its name is so close to a declared
    # type that it is surely a typo worth stopping for.
    parent_of: dict[str, str] = {}
    for name in composite:
        body = declared[name]
        child = str(body["child"])
        _positive_int(body.get("count"), f"cell type {name}: count")
        if child not in declared:
            near = difflib.get_close_matches(child, list(declared), n=1, cutoff=0.8)
            if near:
                raise ConfigError(
                    f"cell type {name}: unknown child type {child} (did you mean {near[0]}? "
                    f"declare a new GPU model as {child}: {{}} to use it)"
                )
        if child == name:
            raise ConfigError(f"cell type {name}: a cell type cannot be its own child")
        if child in parent_of:
            raise ConfigError(
                f"cell type {child} is the child of both {parent_of[child]} and {name}; "
                f"give each chain its own cell types"
            )
        parent_of[child] = name
    for name in explicit_leaves:
        body = declared[name]
        if "count" in body and body["count"] not in (None, 1):
            raise ConfigError(
                f"cell type {name}: a leaf (GPU) type has no count; add child: TYPE or drop count"
            )
        if body.get("node"):
            raise ConfigError(f"cell type {name}: a single GPU cannot be the node level")
    return parent_of


def _chain_path(leaf: str, parent_of: Mapping[str, str]) -> list[str]:
    """The chain's types from its leaf up to its top type."""
    path = [leaf]
    while path[-1] in parent_of:
        nxt = parent_of[path[-1]]
        if nxt in path:
            raise ConfigError(f"cell types form a cycle: {' -> '.join([*path, nxt])}")
        path.append(nxt)
    return path


def _node_level(leaf: str, path: list[str], declared: Mapping[str, Mapping[str, Any]]) -> int:
    node_types = [t for t in path if declared.get(t, {}).get("node")]
    if len(node_types) > 1:
        raise ConfigError(
            f"chain {leaf} has two node levels ({', '.join(node_types)}); mark exactly one type with node: true"
        )
    if not node_types:
        raise ConfigError(
            f"chain {leaf} ({' < '.join(path)}) has no node level; mark one type with node: true"
        )
    return path.index(node_types[0]) + 1


def _chain_types(
    leaf: str, path: list[str], node_level: int, declared: Mapping[str, Mapping[str, Any]]
) -> dict[str, CellType]:
    types: dict[str, CellType] = {}
    gpus = 1
    memory = parse_memory_mib(declared.get(leaf, {}).get("memory"), f"cell type {leaf}: memory")
    for level, t in enumerate(path, start=1):
        body = declared.get(t, {})
        if level > 1 and body.get("memory") is not None:
            raise ConfigError(f"cell type {t}: memory belongs on the leaf GPU type {leaf}")
        count = 1 if level == 1 else int(body["count"])
        gpus *= count
        nodes = 1
        if level > node_level:
            nodes = gpus // _gpus_of(path[:node_level], declared)
        types[t] = CellType(
            name=t,
            chain=leaf,
            level=level,
            child=None if level == 1 else path[level - 2],
            count=count,
            gpus=gpus,
            nodes=nodes,
            is_node=(level == node_level),
            memory_mib=memory if level == 1 else None,
        )
    return types


def _gpus_of(path: list[str], declared: Mapping[str, Mapping[str, Any]]) -> int:
    g = 1
    for t in path[1:]:
        g *= int(declared[t]["count"])
    return g


def _parse_physical_cells(
    raw: Any, types: dict[str, CellType], chains: dict[str, ChainSpec]
) -> tuple[list[PhysicalCellSpec], list[NodeSpec]]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("cluster.physical_cells must be a list like [{type: V100-NODE, nodes: [node1]}]")
    cells: list[PhysicalCellSpec] = []
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw):
        where = f"cluster.physical_cells[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected {{type: TYPE, nodes: [NAME, ...]}}, got {entry!r}")
        unknown = set(entry) - {"type", "nodes", "gpu_indices"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (allowed: type, nodes, gpu_indices)"
            )
        tname = str(entry.get("type"))
        if tname not in types:
            near = difflib.get_close_matches(tname, list(types), n=1)
            hint = f" (did you mean {near[0]}?)" if near else f" (known: {', '.join(types)})"
            raise ConfigError(f"{where}: unknown cell type {tname}{hint}")
        ct = types[tname]
        chain = chains[ct.chain]
        if ct.level < chain.node_level:
            raise ConfigError(
                f"{where}: a physical cell must be a whole node or bigger; {tname} is below the node level "
                f"{chain.type_at(chain.node_level)}"
            )
        raw_nodes = _entry_nodes(entry, where)
        indices = _entry_indices(entry, where, chain)
        if ct.is_node:
            groups = [[n] for n in raw_nodes]  # a node-level entry may list several nodes: one cell each
        else:
            if len(raw_nodes) != ct.nodes:
                raise ConfigError(
                    f"{where}: a {tname} cell spans {ct.nodes} nodes but {len(raw_nodes)} are listed "
                    f"({', '.join(raw_nodes)})"
                )
            groups = [list(raw_nodes)]
        for group in groups:
            for n in group:
                if n in seen:
                    raise ConfigError(
                        f"node {n} is named twice in cluster.physical_cells (entries {seen[n]} and {i})"
                    )
                seen[n] = i
            cells.append(PhysicalCellSpec(type=tname, nodes=tuple(group), gpu_indices=indices))
            for n in group:
                idx = list(indices) if indices else list(chain.node_indices)
                nodes.append(
                    NodeSpec(
                        name=n,
                        gpu_type=chain.name,
                        gpu_indices=idx,
                        socket_of=_sockets(chain, types, idx),
                        chain=chain.name,
                    )
                )
    return cells, nodes


def _entry_nodes(entry: Mapping[str, Any], where: str) -> list[str]:
    raw_nodes = entry.get("nodes")
    if isinstance(raw_nodes, str):
        raw_nodes = [raw_nodes]
    if (
        not isinstance(raw_nodes, list)
        or not raw_nodes
        or not all(isinstance(n, str) and n for n in raw_nodes)
    ):
        raise ConfigError(f"{where}: nodes must be a list of node names, e.g. nodes: [node1] or [node[1-4]]")
    return [n for name in raw_nodes for n in expand_hostlist(name, where)]


def _entry_indices(entry: Mapping[str, Any], where: str, chain: ChainSpec) -> tuple[int, ...] | None:
    gi = entry.get("gpu_indices")
    if gi is None:
        return None
    if (
        not isinstance(gi, list)
        or len(gi) != chain.gpus_per_node
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in gi)
        or len(set(gi)) != len(gi)
    ):
        raise ConfigError(
            f"{where}: gpu_indices must list {chain.gpus_per_node} distinct GPU indices per node in tree order"
        )
    return tuple(gi)


_RANGE_RE = re.compile(r"^([^\[\]]*)\[([0-9,\-]+)\]([^\[\]]*)$")


def expand_hostlist(name: str, where: str = "nodes") -> list[str]:
    """'node[1-3,7]' -> node1, node2, node3, node7; 'gpu[01-02]' keeps the zero padding."""
    if "[" not in name and "]" not in name:
        return [name]
    m = _RANGE_RE.match(name)
    if not m:
        raise ConfigError(f"{where}: cannot read node list {name!r}; write node[1-4] or list the names")
    prefix, body, suffix = m.groups()
    out: list[str] = []
    for part in body.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise ConfigError(f"{where}: bad range {part!r} in {name!r}")
        width = len(lo) if lo.startswith("0") else 0
        for i in range(int(lo), int(hi or lo) + 1):
            out.append(f"{prefix}{str(i).zfill(width)}{suffix}")
    return out


def _sockets(chain: ChainSpec, types: dict[str, CellType], indices: list[int]) -> dict[int, int]:
    """The socket of a GPU = which child of the node cell holds it (all 0 when the node's children are GPUs)."""
    if chain.node_level <= 2:
        return {i: 0 for i in indices}
    per_child = types[chain.type_at(chain.node_level - 1)].gpus
    return {idx: pos // per_child for pos, idx in enumerate(indices)}


def _parse_vcs(raw: Any, types: dict[str, CellType]) -> dict[str, VCSpec]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("virtual_clusters must be a mapping of VC name -> {cells: {TYPE: N}}")
    vcs: dict[str, VCSpec] = {}
    for name, body in raw.items():
        name = str(name)
        if not isinstance(body, Mapping) or not isinstance(body.get("cells"), Mapping):
            raise ConfigError(f"virtual cluster {name}: expected {{cells: {{TYPE: N, ...}}}}")
        unknown = set(body) - {"cells", "description"}
        if unknown:
            raise ConfigError(
                f"virtual cluster {name}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (allowed: cells)"
            )
        cells: dict[str, int] = {}
        for tname, n in body["cells"].items():
            tname = str(tname)
            if tname not in types:
                near = difflib.get_close_matches(tname, list(types), n=1)
                hint = f" (did you mean {near[0]}?)" if near else f" (known: {', '.join(types)})"
                raise ConfigError(f"virtual cluster {name}: unknown cell type {tname}{hint}")
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ConfigError(
                    f"virtual cluster {name}: {tname} count must be a whole number >= 0, got {n!r}"
                )
            if n:
                cells[tname] = n
        vcs[name] = VCSpec(name=name, cells=cells)
    return vcs


def parse_cluster_config(data: Mapping[str, Any], check_feasible: bool = True) -> ClusterSpec:
    """Build the ClusterSpec from a whole config mapping (its ``cluster`` and ``virtual_clusters``)."""
    if not isinstance(data, Mapping):
        raise ConfigError("the configuration must be a mapping with cluster: and virtual_clusters: sections")
    cluster = data.get("cluster")
    if not isinstance(cluster, Mapping):
        raise ConfigError("missing cluster: section (cell_types and physical_cells)")
    unknown = set(cluster) - {"cell_types", "physical_cells"}
    if unknown:
        raise ConfigError(
            f"cluster: unknown key(s) {', '.join(sorted(map(str, unknown)))} (allowed: cell_types, physical_cells)"
        )
    types, chains = _parse_cell_types(cluster.get("cell_types"))
    cells, nodes = _parse_physical_cells(cluster.get("physical_cells"), types, chains)
    used_chains = {types[c.type].chain for c in cells}
    vcs = _parse_vcs(data.get("virtual_clusters"), types)
    for vc in vcs.values():
        for tname in vc.cells:
            if types[tname].chain not in used_chains:
                raise ConfigError(
                    f"virtual cluster {vc.name}: cell type {tname} belongs to chain {types[tname].chain}, "
                    f"which has no physical cells"
                )
    # chains without physical cells are dropped so every listed GPU type really exists
    chains = {k: v for k, v in chains.items() if k in used_chains}
    types = {k: v for k, v in types.items() if v.chain in used_chains}
    spec = ClusterSpec(cell_types=types, chains=chains, physical_cells=cells, nodes=nodes, vcs=vcs)
    if check_feasible:
        check_feasibility(spec)
    return spec
