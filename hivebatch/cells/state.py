"""What the cell allocator knows: the VCs' cells, the jobs, and per-cell counters kept along the tree.

Every change of a GPU (job, health, outside work) goes through :meth:`CellState.set_leaf`, which
keeps the counters of all its ancestors, the buddy free lists, the per-cell job tally and the VCs'
"roomy" indexes in step. Binding (binding.py), the search (search.py) and the views read this state;
only the allocator's API and binding change it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hivebatch.cells.buddy import Buddy
from hivebatch.cells.notice import NoticeBook
from hivebatch.cells.spec import ClusterSpec
from hivebatch.cells.tree import Cell, PhysicalTree
from hivebatch.cells.types import JobState

#: the outside-work tag of the GPUs one request must not use (never a Slurm job id)
AVOIDED = "\x00avoided"


class Wait(Exception):
    """The request cannot be placed now; the message is the plain-words reason."""


class Reject(Exception):
    """The request can never be placed as asked."""


def placement_of(leaves: list[Cell]) -> dict[str, list[int]]:
    """GPU indices per node, in the order of ``leaves``."""
    placement: dict[str, list[int]] = {}
    for leaf in leaves:
        assert leaf.node is not None
        placement.setdefault(leaf.node, []).append(leaf.index)
    return placement


@dataclass
class Job:
    job_id: str
    vc: str
    priority: int
    chain: str
    leaves: list[Cell]

    def state(self) -> JobState:
        placement = placement_of(self.leaves)
        return JobState(
            job_id=self.job_id,
            vc=self.vc,
            priority=self.priority,
            placement={n: sorted(ix) for n, ix in placement.items()},
            gpus=len(self.leaves),
            gpu_type=self.chain,
        )


class VCState:
    """One VC's cells per chain and level: how many it has, which are bound, which are unbound."""

    def __init__(self, name: str, spec: ClusterSpec) -> None:
        self.name = name
        self.total: dict[str, list[int]] = {}  # chain -> cells per level
        self.unbound: dict[str, list[int]] = {}
        self.bound: dict[str, list[dict[int, Cell]]] = {}
        # bound cells with at least one usable GPU: what a new job can pack into without a scan
        self.roomy: dict[str, list[dict[int, Cell]]] = {}
        for cname, chain in spec.chains.items():
            self.total[cname] = [0] * (chain.top_level + 1)
            self.bound[cname] = [{} for _ in range(chain.top_level + 1)]
            self.roomy[cname] = [{} for _ in range(chain.top_level + 1)]
        for tname, n in spec.vcs[name].cells.items():
            ct = spec.cell_types[tname]
            self.total[ct.chain][ct.level] += n
        for cname in spec.chains:
            self.unbound[cname] = list(self.total[cname])


def _flags(leaf: Cell) -> tuple[int, int, int, int, int]:
    g = 1 if leaf.job is not None and not leaf.opp else 0
    o = 1 if leaf.job is not None and leaf.opp else 0
    b = 1 if (leaf.bad or leaf.foreign is not None) else 0
    block = 1 if (g or b) else 0
    optblock = 1 if (leaf.bcell is not None or leaf.job is not None or b) else 0
    return g, o, b, block, optblock


class CellState:
    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.tree = PhysicalTree(spec)
        self.buddy = Buddy(spec, self.tree)
        self.vcs: dict[str, VCState] = {v: VCState(v, spec) for v in spec.vcs}
        self.placed: dict[str, Job] = {}  # jobs holding GPUs
        self.vc_jobs: dict[str, dict[str, Job]] = {v: {} for v in self.vcs}
        # bound cell id -> guaranteed job -> GPUs it holds in the cell (for the preemption pass)
        self.cell_jobs: dict[int, dict[str, int]] = {}
        self.ended: set[str] = set()  # waiting or preempted: a release answers ok once
        self.released: set[str] = set()  # a second release is an error
        self.foreign_leaves: dict[str, list[Cell]] = {}  # tag -> GPUs busy with outside work
        # the free GPUs of the nodes the request being decided must not use, tagged AVOIDED meanwhile
        self.avoid_mask: list[Cell] = []
        self.unhealthy: dict[str, int] = {c: 0 for c in spec.chains}  # bad or foreign GPUs per chain
        self.charge_order = list(self.vcs)[::-1]
        # what the caller knows of the running jobs, set before a round (none: every victim costs the
        # same and is preempted at once): GPU-seconds each would lose if preempted now, and notices
        self.at_stake: dict[str, float] = {}
        self.notice: NoticeBook | None = None
        # unbound VC cells per chain and level, summed over VCs (the demand the free cells must back)
        self.demand: dict[str, list[int]] = {}
        for cname, chain in spec.chains.items():
            d = [0] * (chain.top_level + 1)
            for vc in self.vcs.values():
                for lv in range(chain.top_level + 1):
                    d[lv] += vc.unbound[cname][lv]
            self.demand[cname] = d

    # ---------------------------------------------------------------- GPU state updates
    def set_job(self, leaf: Cell, job: str | None, opp: bool) -> None:
        """Put a job on a GPU (or take it off, with None) and update every counter."""
        old_job, before = leaf.job, _flags(leaf)
        leaf.job, leaf.opp = job, opp
        self._recount(leaf, before, old_job)

    def set_bad(self, leaf: Cell, bad: bool) -> None:
        before = _flags(leaf)
        leaf.bad = bad
        self._recount(leaf, before, leaf.job)

    @contextmanager
    def unmasked(self) -> Iterator[None]:
        """The cells as every other request sees them: a binding's safety check counts the GPUs one
        request must not use as the free GPUs they are for the other VCs' guarantees (masked, a job
        asking for one node of many found every guarantee at risk and waited on an idle cluster)."""
        mask = self.avoid_mask
        for leaf in mask:
            self.set_foreign(leaf, None)
        try:
            yield
        finally:
            for leaf in mask:
                self.set_foreign(leaf, AVOIDED)

    def set_foreign(self, leaf: Cell, tag: str | None) -> None:
        """Mark a GPU busy with outside work (``tag``) or free of it (None)."""
        before = _flags(leaf)
        leaf.foreign = tag
        self._recount(leaf, before, leaf.job)

    def _recount(self, leaf: Cell, before: tuple[int, int, int, int, int], old_job: str | None) -> None:
        """Pass the change of one GPU's flags to its ancestors, the free lists and the bound cell."""
        g0, o0, b0, k0, p0 = before
        g1, o1, b1, k1, p1 = _flags(leaf)
        dg, do, db, dk, dp = g1 - g0, o1 - o0, b1 - b0, k1 - k0, p1 - p0
        if not (dg or do or db or dk or dp):
            return
        c: Cell | None = leaf
        # a free cell on the path is re-filed (bucket, healthy decomposition) around the change
        free_anc = self.buddy.free_ancestor(leaf) if (do or db) else None
        if free_anc is not None:
            self.buddy.before_change(free_anc)
        if db:
            self.unhealthy[leaf.chain] += db
        while c is not None:
            c.n_g += dg
            c.n_opp += do
            c.n_bad += db
            c.n_block += dk
            c.n_optblock += dp
            if db:
                c.decomp = None
            c = c.parent
        if free_anc is not None:
            self.buddy.after_change(free_anc)
        if leaf.bcell is not None:
            if dg:
                self._tally(leaf.bcell.id, leaf.job if dg > 0 else old_job, dg)
            if dk:
                self.file_roomy(leaf.bcell)

    def _tally(self, cell_id: int, job: str | None, delta: int) -> None:
        if job is None:
            return
        row = self.cell_jobs.setdefault(cell_id, {})
        k = row.get(job, 0) + delta
        if k > 0:
            row[job] = k
        else:
            row.pop(job, None)
            if not row:
                del self.cell_jobs[cell_id]

    def file_roomy(self, cell: Cell) -> None:
        assert cell.bound_vc is not None
        roomy = self.vcs[cell.bound_vc].roomy[cell.chain][cell.level]
        if cell.n_block < cell.size:
            roomy[cell.id] = cell
        else:
            roomy.pop(cell.id, None)

    # ---------------------------------------------------------------- words for reasons
    def bad_note(self, chain: str) -> str:
        """`` (bad nodes: ...; GPUs busy with outside work on ...)`` for the chain, or ``""``."""
        nodes = self.tree.nodes_of_chain[chain]
        bad = [n.node for n in nodes if n.n_bad and any(lf.bad for lf in n.leaves)]
        foreign = [n.node for n in nodes if any(lf.foreign and lf.foreign != AVOIDED for lf in n.leaves)]
        parts = []
        if bad:
            parts.append(f"bad nodes: {', '.join(str(b) for b in bad[:6])}{' ...' if len(bad) > 6 else ''}")
        if foreign:
            parts.append(f"GPUs busy with outside work on {', '.join(str(f) for f in foreign[:6])}")
        return f" ({'; '.join(parts)})" if parts else ""

    def cells_text(self, vc: str, chain: str | None = None) -> str:
        """The VC's cells as configured, e.g. ``V100-NODE x2, V100 x1``."""
        parts = [
            f"{t} x{k}"
            for t, k in self.spec.vcs[vc].cells.items()
            if chain is None or self.spec.cell_types[t].chain == chain
        ]
        return ", ".join(parts) or "none"
