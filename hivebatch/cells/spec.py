"""The validated shape of a cluster: cell types, chains, physical cells, nodes and VCs (plain dataclasses).

``config.py`` builds a :class:`ClusterSpec` from the config file; everything else in the cell core
reads it and trusts its shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hivebatch.errors import ConfigError


class InfeasibleConfigError(ConfigError):
    """The VCs ask for more cells of some level than the physical cluster can provide."""

    def __init__(self, chain: str, level: int, cell_type: str, needed: int, available: int) -> None:
        self.chain = chain
        self.level = level
        self.cell_type = cell_type
        self.needed = needed
        self.available = available
        super().__init__(
            f"infeasible virtual clusters: chain {chain}, level {level} ({cell_type}): "
            f"the VCs need {needed} cells but the cluster has only {available} available "
            f"(counting splits of higher cells); reduce the VC cells or add hardware"
        )


@dataclass(frozen=True)
class CellType:
    name: str
    chain: str
    level: int  # 1 = leaf (one GPU)
    child: str | None
    count: int  # children per cell; 1 for a leaf
    gpus: int  # GPUs in one cell of this type
    nodes: int  # nodes one cell spans (1 at or below node level)
    is_node: bool
    memory_mib: int | None = None


@dataclass(frozen=True)
class ChainSpec:
    name: str  # = the leaf type = the GPU type
    types: tuple[str, ...]  # bottom-up; types[level - 1]
    node_level: int
    gpus_per_node: int
    node_indices: tuple[int, ...]  # default GPU indices of a node, tree order

    def type_at(self, level: int) -> str:
        return self.types[level - 1]

    @property
    def top_level(self) -> int:
        return len(self.types)


@dataclass(frozen=True)
class PhysicalCellSpec:
    type: str
    nodes: tuple[str, ...]
    gpu_indices: tuple[int, ...] | None = None  # per node, tree order; None = 0..n-1


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_type: str
    gpu_indices: list[int]
    socket_of: dict[int, int]
    chain: str


@dataclass(frozen=True)
class VCSpec:
    name: str
    cells: dict[str, int]


@dataclass
class ClusterSpec:
    cell_types: dict[str, CellType]
    chains: dict[str, ChainSpec]
    physical_cells: list[PhysicalCellSpec]
    nodes: list[NodeSpec]
    vcs: dict[str, VCSpec]
    _node_by_name: dict[str, NodeSpec] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._node_by_name = {n.name: n for n in self.nodes}

    @property
    def gpu_types(self) -> list[str]:
        return list(self.chains)

    def node(self, name: str) -> NodeSpec:
        return self._node_by_name[name]

    def has_node(self, name: str) -> bool:
        return name in self._node_by_name

    def gpus_per_node(self, gpu_type: str) -> int:
        return self.chains[gpu_type].gpus_per_node

    def vc_gpus(self, vc: str, gpu_type: str | None = None) -> int:
        total = 0
        for type_name, n in self.vcs[vc].cells.items():
            ct = self.cell_types[type_name]
            if gpu_type is None or ct.chain == gpu_type:
                total += ct.gpus * n
        return total

    def vc_whole_nodes(self, vc: str, chain: str) -> int:
        """Nodes the VC's cells at node level or above span on ``chain``: a job on more than one node
        runs only in those (a cell below node level lies on one node)."""
        ch = self.chains[chain]
        return sum(
            n * ct.nodes
            for type_name, n in self.vcs[vc].cells.items()
            if (ct := self.cell_types[type_name]).chain == chain and ct.level >= ch.node_level
        )

    def node_reach(self, vc: str | None, gpu_type: str | None) -> int:
        """How many nodes one job can span: in VC ``vc``'s whole-node cells, the most of any chain
        (of ``gpu_type``'s when given); on idle GPUs (``vc`` None), the cluster's nodes of the type."""
        chains = [gpu_type] if gpu_type else list(self.gpu_types)
        if vc is None:
            return sum(1 for n in self.nodes if n.gpu_type in chains)
        return max(self.vc_whole_nodes(vc, c) for c in chains)

    def vc_node_gpus(self, vc: str, chain: str) -> int:
        """The most GPUs a one-node job of the VC can have on ``chain``: its largest cell's, up to a node's."""
        gpn = self.chains[chain].gpus_per_node
        return max(
            (
                min(ct.gpus, gpn)
                for t, n in self.vcs[vc].cells.items()
                if n and (ct := self.cell_types[t]).chain == chain
            ),
            default=0,
        )

    def gpu_memory_mib(self, gpu_type: str) -> int | None:
        ct = self.cell_types.get(gpu_type)
        return ct.memory_mib if ct else None

    def total_gpus(self, gpu_type: str | None = None) -> int:
        return sum(len(n.gpu_indices) for n in self.nodes if gpu_type is None or n.gpu_type == gpu_type)

    def vc_chains(self, vc: str) -> list[str]:
        """Chains where the VC has cells, in config order of the chains."""
        mine = {self.cell_types[t].chain for t, n in self.vcs[vc].cells.items() if n > 0}
        return [c for c in self.chains if c in mine]
