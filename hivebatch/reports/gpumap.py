"""The node × GPU map of the cluster now, and where its free GPUs are fragmented.

Built from the controller's last picture of every GPU (the DB's GPU bindings), corrected by what
Slurm says live when it is reachable: a node Slurm reports DOWN/DRAIN is bad, a GPU Slurm shows in
use that the ledger thinks free is foreign work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

FREE = "free"
GUARANTEED = "guaranteed"
OPPORTUNISTIC = "opportunistic"
FOREIGN = "foreign"


@dataclass(frozen=True)
class GpuSlot:
    node: str
    index: int
    kind: str = FREE  # free | guaranteed | opportunistic | foreign
    vc: str | None = None  # VC whose cell holds the GPU (or whose job borrows it, when opportunistic)
    job: str | None = None
    user: str | None = None
    bad: bool = False
    shared: int = 0  # jobs sharing this GPU beyond the first (fractional GPUs)
    stale: bool = False  # the ledger's last cycle showed a job here, but Slurm shows the GPU idle now
    share: str | None = None  # a GPU shared by slices: "shared sys 16G/32G 2 jobs" (controller's ledger)

    @property
    def free(self) -> bool:
        return self.kind == FREE and not self.bad and self.job is None and not self.shared


@dataclass(frozen=True)
class NodeLayout:
    """A node's GPUs and the cell levels inside it, leaf first: [("V100", 1), ("V100-SWITCH", 2), …]."""

    name: str
    gpu_type: str | None
    gpu_indices: list[int]
    levels: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class NodeMap:
    name: str
    gpu_type: str | None
    slots: list[GpuSlot]
    levels: list[tuple[str, int]]
    bad: bool = False
    state: str = ""

    @property
    def free_gpus(self) -> int:
        return sum(1 for s in self.slots if s.free)

    def boundary_level(self, position: int) -> int:
        """How many cell levels end between slot ``position`` and the next (0 = same smallest cell)."""
        level = 0
        for _name, size in self.levels[1:]:
            if size and (position + 1) % size == 0:
                level += 1
        return level

    def free_cells(self) -> dict[str, int]:
        """Free cells at the highest level possible (buddy style): a free socket is not also two switches."""
        counts: dict[str, int] = {}
        sizes = [size for _n, size in self.levels] or [1]
        names = [n for n, _s in self.levels] or ["GPU"]

        def visit(start: int, level: int) -> None:
            size = sizes[level]
            block = self.slots[start : start + size]
            if len(block) == size and all(s.free for s in block):
                counts[names[level]] = counts.get(names[level], 0) + 1
                return
            if level == 0:
                return
            child = sizes[level - 1]
            for offset in range(start, min(start + size, len(self.slots)), child):
                visit(offset, level - 1)

        top = len(sizes) - 1
        step = sizes[top]
        for start in range(0, len(self.slots), step):
            visit(start, top)
        return counts


@dataclass
class Fragmentation:
    free_gpus: int
    free_nodes: int  # nodes with every GPU free and healthy
    free_on_whole_nodes: int
    stranded_gpus: int  # free GPUs on partly used nodes: only jobs smaller than a node can use them
    partly_used_nodes: list[tuple[str, int]]  # (node, free GPUs), most free first
    largest_block: int  # most free GPUs on any one healthy node
    free_cells: dict[str, int]
    bad_nodes: list[str]

    def summary(self) -> str:
        if not self.free_gpus:
            return "no free GPUs"
        parts = [f"{self.free_gpus} GPUs free"]
        if self.free_nodes:
            parts.append(
                f"{self.free_on_whole_nodes} on {self.free_nodes} whole node{'s' * (self.free_nodes > 1)}"
            )
        if self.stranded_gpus:
            parts.append(
                f"{self.stranded_gpus} scattered over {len(self.partly_used_nodes)} partly used "
                f"node{'s' * (len(self.partly_used_nodes) > 1)}"
            )
        return ", ".join(parts) + f"; largest free block {self.largest_block} GPUs on one node"


@dataclass
class ClusterMap:
    nodes: list[NodeMap]

    @property
    def vcs(self) -> list[str]:
        seen: list[str] = []
        for node in self.nodes:
            for s in node.slots:
                if s.vc and s.vc not in seen:
                    seen.append(s.vc)
        return sorted(seen)

    @property
    def stale_gpus(self) -> int:
        return sum(1 for n in self.nodes for s in n.slots if s.stale)

    def counts(self) -> dict[str, int]:
        out = {FREE: 0, GUARANTEED: 0, OPPORTUNISTIC: 0, FOREIGN: 0, "shared": 0, "bad": 0}
        for node in self.nodes:
            for s in node.slots:
                if s.bad:
                    out["bad"] += 1
                elif (s.share or (s.shared and s.kind == FREE)) and s.job is None:  # slices, not one job
                    out["shared"] += 1
                else:
                    out[s.kind if s.kind in out else FREE] += 1
        return out

    def fragmentation(self) -> Fragmentation:
        free_nodes = 0
        on_whole = 0
        partly: list[tuple[str, int]] = []
        cells: dict[str, int] = {}
        largest = 0
        for node in self.nodes:
            if node.bad:
                continue
            free = node.free_gpus
            largest = max(largest, free)
            if free and free == len(node.slots):
                free_nodes += 1
                on_whole += free
            elif free:
                partly.append((node.name, free))
            for name, n in node.free_cells().items():
                cells[name] = cells.get(name, 0) + n
        partly.sort(key=lambda item: (-item[1], item[0]))
        sizes = {name: size for node in self.nodes for name, size in node.levels}
        cells = dict(sorted(cells.items(), key=lambda item: (-sizes.get(item[0], 1), item[0])))
        total = on_whole + sum(n for _node, n in partly)
        return Fragmentation(
            free_gpus=total,
            free_nodes=free_nodes,
            free_on_whole_nodes=on_whole,
            stranded_gpus=total - on_whole,
            partly_used_nodes=partly,
            largest_block=largest,
            free_cells=cells,
            bad_nodes=[n.name for n in self.nodes if n.bad],
        )


def build_cluster_map(
    layouts: list[NodeLayout],
    slots: Iterable[GpuSlot],
    live_nodes: Iterable[Any] | None = None,
    job_users: Mapping[str, str] | None = None,
) -> ClusterMap:
    """Merge the configured layout, the ledger's GPU slots and (optionally) Slurm's live nodes.

    ``live_nodes`` are objects with ``name``, ``state``, ``bad``, ``gpu_indices`` and ``gpus_used``
    (the Slurm backend's SlurmNode).
    """
    by_key = {(s.node, s.index): s for s in slots}
    live = {n.name: n for n in live_nodes} if live_nodes is not None else {}
    users = job_users or {}
    maps: list[NodeMap] = []
    known = set()
    for layout in layouts:
        known.add(layout.name)
        node_live = live.get(layout.name)
        node_bad = bool(node_live.bad) if node_live is not None else False
        used_live = set(node_live.gpus_used) if node_live is not None else set()
        shared_live = set(getattr(node_live, "gpus_shared", None) or []) if node_live is not None else set()
        node_slots: list[GpuSlot] = []
        for index in layout.gpu_indices:
            slot = by_key.get((layout.name, index), GpuSlot(layout.name, index))
            if node_live is not None:
                slot = replace(slot, bad=node_bad)
                if index in used_live and slot.kind == FREE and slot.job is None:
                    slot = replace(slot, kind=FOREIGN)
                elif slot.job and index not in used_live and index not in shared_live:
                    # The job ended since the controller's last cycle: Slurm is the fresher witness.
                    slot = replace(slot, kind=FREE, job=None, user=None, vc=None, stale=True)
                if index in shared_live:
                    slot = replace(slot, shared=max(slot.shared, 1))
            if slot.job and not slot.user:
                slot = replace(slot, user=users.get(slot.job))
            node_slots.append(slot)
        if node_live is None:
            node_bad = any(s.bad for s in node_slots) and all(s.bad for s in node_slots)
        maps.append(
            NodeMap(
                name=layout.name,
                gpu_type=layout.gpu_type,
                slots=node_slots,
                levels=layout.levels,
                bad=node_bad,
                state=(node_live.state if node_live is not None else ("bad" if node_bad else "")),
            )
        )
    for name, node_live in live.items():
        if name in known:
            continue
        used = set(node_live.gpus_used)
        node_slots = [
            GpuSlot(name, i, kind=FOREIGN if i in used else FREE, bad=bool(node_live.bad))
            for i in node_live.gpu_indices
        ]
        maps.append(
            NodeMap(
                name=name,
                gpu_type=None,
                slots=node_slots,
                levels=[],
                bad=bool(node_live.bad),
                state=f"{node_live.state} (not in config)",
            )
        )
    return ClusterMap(nodes=maps)
