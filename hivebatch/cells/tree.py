"""The physical cell tree with per-cell counters the allocator keeps up to date.

Counters are summed over a cell's GPUs and updated along the ancestors of a GPU whose state changes
(O(depth)), so that "does this cell have g GPUs free?" is a field read, not a scan.
"""

from __future__ import annotations

from hivebatch.cells.spec import ClusterSpec


class Cell:
    __slots__ = (
        "id",
        "chain",
        "level",
        "type",
        "parent",
        "children",
        "node",
        "nodes",
        "leaves",
        "size",
        "index",
        "by_level",
        "node_cells",
        # buddy state
        "free",
        "split",
        "bound_vc",
        "decomp",
        # counters over the cell's GPUs
        "n_g",
        "n_opp",
        "n_bad",
        "n_block",
        "n_optblock",
        # leaf (GPU) state
        "job",
        "opp",
        "bad",
        "foreign",
        "bcell",
    )

    def __init__(self, cid: int, chain: str, level: int, type_name: str, parent: Cell | None) -> None:
        self.id = cid
        self.chain = chain
        self.level = level
        self.type = type_name
        self.parent = parent
        self.children: list[Cell] = []
        self.node: str | None = None  # set at and below node level
        self.nodes: tuple[str, ...] = ()
        self.leaves: list[Cell] = []
        self.size = 0
        self.index = -1  # GPU index (leaves only)
        self.by_level: dict[int, list[Cell]] = {}  # descendants (and self) per level
        self.node_cells: list[Cell] = []  # node-level descendants (or the node-level ancestor's self)
        self.free = False
        self.split = False
        self.bound_vc: str | None = None
        self.decomp: tuple[int, ...] | None = None
        self.n_g = 0
        self.n_opp = 0
        self.n_bad = 0
        self.n_block = 0
        self.n_optblock = 0
        self.job: str | None = None
        self.opp = False
        self.bad = False
        self.foreign: str | None = None
        self.bcell: Cell | None = None

    def __repr__(self) -> str:
        where = self.node or ",".join(self.nodes)
        return f"<{self.type} {where}{'' if self.index < 0 else ':' + str(self.index)}>"

    def label(self) -> str:
        if self.level == 1:
            return f"{self.node} GPU {self.index}"
        if self.node is not None:
            idx = [leaf.index for leaf in self.leaves]
            whole = len(self.nodes) == 1 and self.node_cells and self.node_cells[0] is self
            return self.node if whole else f"{self.node} GPUs {_ranges(idx)}"
        return "+".join(self.nodes)


def _ranges(idx: list[int]) -> str:
    s = sorted(idx)
    if s and s == list(range(s[0], s[-1] + 1)) and len(s) > 1:
        return f"{s[0]}-{s[-1]}"
    return ",".join(map(str, s))


class PhysicalTree:
    """All physical cells of all chains, plus lookup tables."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.tops: list[Cell] = []
        self.cells: list[Cell] = []
        self.node_cell: dict[str, Cell] = {}
        self.leaf: dict[tuple[str, int], Cell] = {}
        self.nodes_of_chain: dict[str, list[Cell]] = {c: [] for c in spec.chains}
        for pc in spec.physical_cells:
            ct = spec.cell_types[pc.type]
            chain = spec.chains[ct.chain]
            node_iter = iter(pc.nodes)
            top = self._build(ct.chain, ct.level, None, node_iter, pc.gpu_indices, chain.node_indices)
            self.tops.append(top)
        self.node_order: dict[str, int] = {n: i for i, n in enumerate(self.node_cell)}

    def _build(
        self,
        chain_name: str,
        level: int,
        parent: Cell | None,
        node_iter: object,
        indices: tuple[int, ...] | None,
        default_indices: tuple[int, ...],
        node: str | None = None,
        pos: list[int] | None = None,
    ) -> Cell:
        chain = self.spec.chains[chain_name]
        tname = chain.type_at(level)
        cell = Cell(len(self.cells), chain_name, level, tname, parent)
        self.cells.append(cell)
        if level == chain.node_level:
            node = next(node_iter)  # type: ignore[call-overload]
            pos = [0]
            self.node_cell[node] = cell
            self.nodes_of_chain[chain_name].append(cell)
        cell.node = node
        if level == 1:
            assert node is not None and pos is not None
            order = indices or default_indices
            cell.index = order[pos[0]]
            pos[0] += 1
            cell.leaves = [cell]
            cell.size = 1
            cell.nodes = (node,)
            self.leaf[(node, cell.index)] = cell
        else:
            count = self.spec.cell_types[tname].count
            for _ in range(count):
                child = self._build(
                    chain_name, level - 1, cell, node_iter, indices, default_indices, node, pos
                )
                cell.children.append(child)
            cell.leaves = [leaf for ch in cell.children for leaf in ch.leaves]
            cell.size = len(cell.leaves)
            seen: dict[str, None] = {}
            for ch in cell.children:
                for n in ch.nodes:
                    seen[n] = None
            cell.nodes = tuple(seen)
        cell.by_level = {level: [cell]}
        for ch in cell.children:
            for lv, lst in ch.by_level.items():
                cell.by_level.setdefault(lv, []).extend(lst)
        if level >= chain.node_level:
            cell.node_cells = cell.by_level[chain.node_level]
        return cell
