"""CellAllocator: VC cells bound dynamically to physical cells, gang placement, preemption.

Model (HiveD): a VC owns virtual cells per cell type. A virtual cell is *bound* to a physical cell
of the same level only while a guaranteed job of the VC uses a GPU in it; binding takes the
physical cell from the buddy free lists, unbinding gives it back (and merges buddies). Because
the whole physical cell is reserved while bound, the VC's view of a bound cell is the physical cell
itself. Opportunistic jobs (priority -1) run on GPUs that no VC has bound and are preempted when
a binding or a guaranteed placement needs their GPUs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hivebatch.cells.buddy import Buddy
from hivebatch.cells.config import ClusterSpec, check_feasibility
from hivebatch.cells.tree import Cell, PhysicalTree
from hivebatch.cells.types import (
    OPPORTUNISTIC,
    CellTypeView,
    Decision,
    GpuUse,
    JobState,
    Request,
    UnknownJobError,
    UnknownNodeError,
    UnknownVCError,
    VCView,
)

SNAPSHOT_VERSION = 1


class _Victims:
    """Jobs a higher-priority job may preempt: lower-priority guaranteed jobs of its VC and GPU type.

    Membership is tested against the VC's job table (no set is built); usable GPUs per cell are
    counted on demand and cached for the one request.
    """

    def __init__(
        self, vc_jobs: dict[str, _Job], priority: int, chain: str, cell_jobs: dict[int, dict[str, int]]
    ) -> None:
        self.vc_jobs = vc_jobs
        self.priority = priority
        self.chain = chain
        self.cell_jobs = cell_jobs
        self.cache: dict[int, int] = {}

    def __contains__(self, job_id: object) -> bool:
        j = self.vc_jobs.get(job_id) if isinstance(job_id, str) else None
        return j is not None and 0 <= j.priority < self.priority and j.chain == self.chain

    def any(self) -> bool:
        return any(0 <= j.priority < self.priority and j.chain == self.chain for j in self.vc_jobs.values())

    def extra(self, cell: Cell) -> int:
        """GPUs of victims in the cell that could be taken (not on bad or foreign GPUs)."""
        got = self.cache.get(cell.id)
        if got is None:
            if cell.bound_vc is not None and cell.n_bad == 0:
                # a bound cell: from the per-cell job tally, without touching its GPUs
                got = sum(k for j, k in self.cell_jobs.get(cell.id, {}).items() if j in self)
            else:
                got = sum(1 for lf in cell.leaves if lf.job in self and not lf.bad and lf.foreign is None)
            self.cache[cell.id] = got
        return got


class _Wait(Exception):
    """Internal: the request cannot be placed now; the message is the plain-words reason."""


class _Reject(Exception):
    """Internal: the request can never be placed as asked."""


@dataclass
class _Job:
    job_id: str
    vc: str
    priority: int
    chain: str
    leaves: list[Cell]

    def state(self) -> JobState:
        placement: dict[str, list[int]] = {}
        for leaf in self.leaves:
            assert leaf.node is not None
            placement.setdefault(leaf.node, []).append(leaf.index)
        return JobState(
            job_id=self.job_id,
            vc=self.vc,
            priority=self.priority,
            placement={n: sorted(ix) for n, ix in placement.items()},
            gpus=len(self.leaves),
            gpu_type=self.chain,
        )


class _VC:
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


class CellAllocator:
    def __init__(self, spec: ClusterSpec, *, check: bool = True) -> None:
        if check:
            check_feasibility(spec)
        self.spec = spec
        self.tree = PhysicalTree(spec)
        self.buddy = Buddy(spec, self.tree)
        self.vcs: dict[str, _VC] = {v: _VC(v, spec) for v in spec.vcs}
        self._jobs: dict[str, _Job] = {}
        self._vc_jobs: dict[str, dict[str, _Job]] = {v: {} for v in self.vcs}
        # bound cell id -> guaranteed job -> GPUs it holds in the cell (for the preemption pass)
        self._cell_jobs: dict[int, dict[str, int]] = {}
        self._ended: set[str] = set()  # waiting or preempted: a release answers ok once
        self._released: set[str] = set()  # a second release is an error
        self._foreign: dict[str, list[Cell]] = {}
        self._unhealthy: dict[str, int] = {c: 0 for c in spec.chains}  # bad or foreign GPUs per chain
        self._charge_order = list(self.vcs)[::-1]
        # unbound VC cells per chain and level, summed over VCs (the demand the free cells must back)
        self.demand: dict[str, list[int]] = {}
        for cname, chain in spec.chains.items():
            d = [0] * (chain.top_level + 1)
            for vc in self.vcs.values():
                for lv in range(chain.top_level + 1):
                    d[lv] += vc.unbound[cname][lv]
            self.demand[cname] = d

    # ======================================================================== GPU state updates
    @staticmethod
    def _flags(leaf: Cell) -> tuple[int, int, int, int, int]:
        g = 1 if leaf.job is not None and not leaf.opp else 0
        o = 1 if leaf.job is not None and leaf.opp else 0
        b = 1 if (leaf.bad or leaf.foreign is not None) else 0
        block = 1 if (g or b) else 0
        optblock = 1 if (leaf.bcell is not None or leaf.job is not None or b) else 0
        return g, o, b, block, optblock

    def _set_leaf(self, leaf: Cell, **changes: Any) -> None:
        old_job = leaf.job
        g0, o0, b0, k0, p0 = self._flags(leaf)
        for k, v in changes.items():
            setattr(leaf, k, v)
        g1, o1, b1, k1, p1 = self._flags(leaf)
        dg, do, db, dk, dp = g1 - g0, o1 - o0, b1 - b0, k1 - k0, p1 - p0
        if not (dg or do or db or dk or dp):
            return
        c: Cell | None = leaf
        # a free cell on the path is re-filed (bucket, healthy decomposition) around the change
        free_anc = self.buddy.free_ancestor(leaf) if (do or db) else None
        if free_anc is not None:
            self.buddy.before_change(free_anc)
        if db:
            self._unhealthy[leaf.chain] += db
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
                self._file_roomy(leaf.bcell)

    def _tally(self, cell_id: int, job: str | None, delta: int) -> None:
        if job is None:
            return
        row = self._cell_jobs.setdefault(cell_id, {})
        k = row.get(job, 0) + delta
        if k > 0:
            row[job] = k
        else:
            row.pop(job, None)
            if not row:
                del self._cell_jobs[cell_id]

    def _file_roomy(self, cell: Cell) -> None:
        assert cell.bound_vc is not None
        roomy = self.vcs[cell.bound_vc].roomy[cell.chain][cell.level]
        if cell.n_block < cell.size:
            roomy[cell.id] = cell
        else:
            roomy.pop(cell.id, None)

    # ======================================================================== binding
    def _feasible(self, chain: str, demand: list[int]) -> bool:
        h = self.buddy.healthy[chain]
        ch = self.spec.chains[chain]
        leftover = 0
        for lv in range(ch.top_level, 0, -1):
            avail = leftover + h[lv]
            if demand[lv] > avail:
                return False
            leftover = avail - demand[lv]
            if lv > 1:
                leftover *= self.spec.cell_types[ch.type_at(lv)].count
        return True

    def _no_shortfall(self, chain: str) -> dict[str, list[int]]:
        return {v: [0] * (self.spec.chains[chain].top_level + 1) for v in self.vcs}

    @staticmethod
    def _no_worse(before: dict[str, list[int]], after: dict[str, list[int]], requester: str) -> bool:
        return all(
            a <= b for v, row in after.items() if v != requester for a, b in zip(row, before[v], strict=True)
        )

    def _chain_shortfall(self, chain: str) -> dict[str, list[int]]:
        """Per VC and level: free VC cells no healthy free physical cell can back.

        Top-down as in the load-time check, against healthy free cells; a shortage at a level is
        charged to the VCs in reverse config order (the first VCs of the config keep their cells).
        """
        ch = self.spec.chains[chain]
        out = {v: [0] * (ch.top_level + 1) for v in self.vcs}
        h = self.buddy.healthy[chain]
        leftover = 0
        for lv in range(ch.top_level, 0, -1):
            avail = leftover + h[lv]
            need = self.demand[chain][lv]
            short = max(0, need - avail)
            for vname in self._charge_order:
                if not short:
                    break
                take = min(short, self.vcs[vname].unbound[chain][lv])
                out[vname][lv] = take
                short -= take
            leftover = max(0, avail - need)
            if lv > 1:
                leftover *= self.spec.cell_types[ch.type_at(lv)].count
        return out

    def _try_bind(
        self, vc: str, chain: str, level: int, notes: list[str], undo: list[tuple[str, Any]]
    ) -> Cell | None:
        """_bind, recorded in ``undo`` so a failed placement can unbind it; None (and why, in
        ``notes``) when no healthy physical cell can back it."""
        try:
            cell = self._bind(vc, chain, level)
        except _Wait as exc:
            notes.append(str(exc))
            return None
        undo.append(("bind", cell))
        return cell

    def _bind(self, vc: str, chain: str, level: int) -> Cell:
        """Bind one unbound level-``level`` cell of the VC to a healthy physical cell, or raise _Wait."""
        v = self.vcs[vc]
        assert v.unbound[chain][level] > 0
        # Theorem 1 holds by construction on healthy hardware. With bad hardware some VC must come
        # up short; the shortfall is charged in a fixed order (see shortfall()), and a binding
        # that would shift it onto another VC is refused.
        # (A split made while nodes were bad can leave a guarantee unbacked after they recover, so
        # this is checked whenever the chain is short, not only while hardware is bad.)
        before = None if self._feasible(chain, self.demand[chain]) else self._chain_shortfall(chain)
        tname = self.spec.chains[chain].type_at(level)
        cands = self.buddy.candidates(chain, level)
        if not cands:
            raise _Wait(f"no healthy free {tname} cell is left to bind{self._bad_note(chain)}")
        for start in cands:
            cell = self.buddy.take(start, level)
            v.unbound[chain][level] -= 1
            self.demand[chain][level] -= 1
            if self._feasible(chain, self.demand[chain]) or self._no_worse(
                before if before is not None else self._no_shortfall(chain), self._chain_shortfall(chain), vc
            ):
                self._mark_bound(cell, vc)
                return cell
            v.unbound[chain][level] += 1
            self.demand[chain][level] += 1
            self.buddy.give_back(cell)
        if before is not None and any(before[vc]):
            raise _Wait(
                f"VC {vc}'s free cells cannot all be backed by healthy hardware right now, and the healthy "
                f"free cells left keep other VCs' guarantees{self._bad_note(chain)}"
            )
        raise _Wait(
            f"the healthy free cells left are needed to keep other VCs' guarantees, so no {tname} "
            f"can be bound for VC {vc}{self._bad_note(chain)}"
        )

    def _mark_bound(self, cell: Cell, vc: str) -> None:
        cell.bound_vc = vc
        self.vcs[vc].bound[cell.chain][cell.level][cell.id] = cell
        self._set_bcell(cell, cell)
        self._file_roomy(cell)

    def _set_bcell(self, cell: Cell, value: Cell | None) -> None:
        """(Un)bind every GPU of a cell at once: recount the subtree, then pass the delta upward.

        A bound cell has no free ancestor, so no free list is touched.
        """
        old = cell.n_optblock
        for leaf in cell.leaves:
            leaf.bcell = value
            leaf.n_optblock = (
                1
                if (value is not None or leaf.job is not None or leaf.bad or leaf.foreign is not None)
                else 0
            )
        for lv in range(2, cell.level + 1):
            for c in cell.by_level[lv]:
                c.n_optblock = sum(ch.n_optblock for ch in c.children)
        delta = cell.n_optblock - old
        if delta:
            a = cell.parent
            while a is not None:
                a.n_optblock += delta
                a = a.parent

    def _unbind(self, cell: Cell) -> None:
        vc = cell.bound_vc
        assert vc is not None
        self._set_bcell(cell, None)
        cell.bound_vc = None
        v = self.vcs[vc]
        del v.bound[cell.chain][cell.level][cell.id]
        v.roomy[cell.chain][cell.level].pop(cell.id, None)
        v.unbound[cell.chain][cell.level] += 1
        self.demand[cell.chain][cell.level] += 1
        self.buddy.give_back(cell)

    def _bad_note(self, chain: str) -> str:
        bad = [n.node for n in self.tree.nodes_of_chain[chain] if n.n_bad and any(lf.bad for lf in n.leaves)]
        foreign = [n.node for n in self.tree.nodes_of_chain[chain] if any(lf.foreign for lf in n.leaves)]
        parts = []
        if bad:
            parts.append(f"bad nodes: {', '.join(str(b) for b in bad[:6])}{' ...' if len(bad) > 6 else ''}")
        if foreign:
            parts.append(f"GPUs busy with outside work on {', '.join(str(f) for f in foreign[:6])}")
        return f" ({'; '.join(parts)})" if parts else ""

    # ======================================================================== requests
    def allocate(self, req: Request) -> Decision:
        return self._decide(req, commit=True)

    def try_allocate(self, req: Request) -> Decision:
        """The answer allocate would give, leaving the state unchanged."""
        return self._decide(req, commit=False)

    def _decide(self, req: Request, commit: bool) -> Decision:
        try:
            chains = self._validate(req)
        except _Reject as exc:
            return Decision("rejected", error=str(exc))
        first_wait: tuple[str, str, int, int] | None = None
        first_reject: str | None = None
        for chain in chains:
            try:
                n, g = self._shape(req, chain)
            except _Reject as exc:
                first_reject = first_reject or str(exc)
                continue
            undo: list[tuple[str, Any]] = []
            try:
                leaves, preempt = self._place(req, chain, n, g, undo)
            except _Wait as exc:
                self._rollback(undo)
                if first_wait is None:
                    first_wait = (str(exc), chain, n, g)
                continue
            except _Reject as exc:
                self._rollback(undo)
                first_reject = first_reject or str(exc)
                continue
            placement: dict[str, list[int]] = {}
            for leaf in leaves:
                assert leaf.node is not None
                placement.setdefault(leaf.node, []).append(leaf.index)
            order = self.tree.node_order
            placement = {k: sorted(placement[k]) for k in sorted(placement, key=order.__getitem__)}
            preempted = sorted(preempt)
            if commit:
                # victims give up their GPUs first; their cells are unbound only after the new job
                # holds its GPUs, so a cell both share stays bound
                touched: list[Cell] = []
                for jid in preempted:
                    touched.extend(self._release_job(jid))
                    self._ended.add(jid)
                job = _Job(req.job_id, req.vc, req.priority, chain, leaves)
                for leaf in leaves:
                    self._set_leaf(leaf, job=req.job_id, opp=req.priority < 0)
                self._jobs[req.job_id] = job
                self._vc_jobs[req.vc][req.job_id] = job
                self._ended.discard(req.job_id)
                self._released.discard(req.job_id)
                touched.extend(obj for kind, obj in undo if kind == "bind")
                for cell in touched:
                    self._unbind_if_idle(cell)
            else:
                self._rollback(undo)
            return Decision(
                "placed", placement=placement, preempted=preempted, gpu_type=chain, nodes=n, gpus_per_node=g
            )
        if first_wait is None:
            return Decision("rejected", error=first_reject or f"VC {req.vc} cannot hold {req.gpus} GPUs")
        if commit:
            self._ended.add(req.job_id)
            self._released.discard(req.job_id)
        reason, chain, n, g = first_wait
        return Decision("waiting", reason=reason, gpu_type=chain, nodes=n, gpus_per_node=g)

    def _rollback(self, undo: list[tuple[str, Any]]) -> None:
        for kind, obj in reversed(undo):
            if kind == "bind" and obj.bound_vc is not None and obj.n_g == 0:
                self._unbind(obj)

    # ---------------------------------------------------------------- validation and shape
    def _validate(self, req: Request) -> list[str]:
        if not isinstance(req.gpus, int) or req.gpus < 1:
            raise _Reject(f"a job needs at least 1 GPU (asked for {req.gpus})")
        if req.vc not in self.vcs:
            raise _Reject(f"unknown VC {req.vc} (known: {', '.join(self.vcs) or 'none'})")
        if req.job_id in self._jobs:
            raise _Reject(f"job {req.job_id} already holds GPUs; release it first or use a new job id")
        if req.priority < OPPORTUNISTIC:
            raise _Reject(f"priority must be -1 (opportunistic) or >= 0 (guaranteed), not {req.priority}")
        if req.nodes is not None and (not isinstance(req.nodes, int) or req.nodes < 1):
            raise _Reject(f"nodes must be a positive whole number (got {req.nodes})")
        if req.nodes is not None and req.gpus % req.nodes:
            raise _Reject(f"{req.gpus} GPUs cannot be split evenly over {req.nodes} nodes")
        chains: list[str]
        if req.within is not None:
            if req.within not in self.spec.cell_types:
                raise _Reject(
                    f"unknown cell type {req.within} for within (known: {', '.join(self.spec.cell_types)})"
                )
            wchain = self.spec.cell_types[req.within].chain
            if req.gpu_type is not None and req.gpu_type != wchain:
                raise _Reject(
                    f"within {req.within} is a {wchain} cell but the job asks for GPU type {req.gpu_type}"
                )
        if req.gpu_type is not None:
            if req.gpu_type not in self.spec.chains:
                raise _Reject(f"unknown GPU type {req.gpu_type} (known: {', '.join(self.spec.chains)})")
            chains = [req.gpu_type]
        elif req.within is not None:
            chains = [self.spec.cell_types[req.within].chain]
        elif req.priority < 0:
            mine = self.spec.vc_chains(req.vc)
            chains = mine + [c for c in self.spec.chains if c not in mine]
        else:
            chains = self.spec.vc_chains(req.vc)
            if not chains:
                raise _Reject(f"VC {req.vc} has no cells; it can only run opportunistic jobs (priority -1)")
        return chains

    def _shape(self, req: Request, chain: str) -> tuple[int, int]:
        ch = self.spec.chains[chain]
        gpn = ch.gpus_per_node
        n_nodes = len(self.tree.nodes_of_chain[chain])
        if req.nodes is not None:
            n = req.nodes
        elif req.gpus <= gpn:
            n = 1
        else:
            n = next((k for k in range(-(-req.gpus // gpn), n_nodes + 1) if req.gpus % k == 0), 0)
            if not n:
                raise _Reject(
                    f"{req.gpus} {chain} GPUs cannot be split evenly over at most {n_nodes} nodes of {gpn} GPUs"
                )
        g = req.gpus // n
        if g > gpn:
            raise _Reject(f"{g} GPUs per node is more than a {chain} node has ({gpn})")
        if n > n_nodes:
            raise _Reject(f"the job needs {n} nodes but the cluster has only {n_nodes} {chain} nodes")
        if req.within is not None:
            wt = self.spec.cell_types[req.within]
            if wt.gpus < req.gpus or wt.nodes < n:
                raise _Reject(
                    f"the job ({n} node(s) x {g} GPUs) does not fit within one {req.within}, "
                    f"which holds {wt.gpus} GPU(s) on {wt.nodes} node(s)"
                )
            if n > 1 and wt.level <= ch.node_level:
                raise _Reject(f"a {n}-node job cannot fit within one {req.within} (one node or less)")
        return n, g

    def _min_level(self, chain: str, g: int) -> int:
        ch = self.spec.chains[chain]
        for lv in range(1, ch.node_level + 1):
            if self.spec.cell_types[ch.type_at(lv)].gpus >= g:
                return lv
        raise _Reject(f"{g} GPUs do not fit one {chain} node")

    # ---------------------------------------------------------------- placement
    def _place(
        self, req: Request, chain: str, n: int, g: int, undo: list[tuple[str, Any]]
    ) -> tuple[list[Cell], set[str]]:
        if req.priority < 0:
            return self._place_opportunistic(req, chain, n, g)
        self._check_vc_can_hold(req, chain, n, g)
        try:
            return self._place_guaranteed(req, chain, n, g, undo, victims=None)
        except _Wait as first:
            victims = _Victims(self._vc_jobs[req.vc], req.priority, chain, self._cell_jobs)
            if not victims.any():
                raise
            self._rollback(undo)
            undo.clear()
            try:
                return self._place_guaranteed(req, chain, n, g, undo, victims=victims)
            except _Wait:
                raise first from None

    def _check_vc_can_hold(self, req: Request, chain: str, n: int, g: int) -> None:
        """Reject what the VC could not hold even when empty."""
        ch = self.spec.chains[chain]
        v = self.vcs[req.vc]
        lmin = self._min_level(chain, g)
        have = self._cells_text(req.vc, chain)
        if n == 1:
            if not any(v.total[chain][lv] for lv in range(lmin, ch.top_level + 1)):
                raise _Reject(
                    f"VC {req.vc} has no {chain} cell that can hold {g} GPUs on one node (its cells: {have})"
                )
            return
        wl = self.spec.cell_types[req.within].level if req.within else ch.node_level
        node_room = sum(
            v.total[chain][lv] * self.spec.cell_types[ch.type_at(lv)].nodes
            for lv in range(max(wl, ch.node_level), ch.top_level + 1)
        )
        if req.within:
            if not any(v.total[chain][lv] for lv in range(wl, ch.top_level + 1)):
                raise _Reject(f"VC {req.vc} has no cell as large as {req.within} (its cells: {have})")
        elif node_room < n:
            raise _Reject(
                f"VC {req.vc} holds at most {node_room} whole {chain} node(s) but the job needs {n} nodes (its cells: {have})"
            )

    def _cells_text(self, vc: str, chain: str | None = None) -> str:
        parts = [
            f"{t} x{k}"
            for t, k in self.spec.vcs[vc].cells.items()
            if chain is None or self.spec.cell_types[t].chain == chain
        ]
        return ", ".join(parts) or "none"

    # ---- guaranteed, inside the VC's cells
    def _avail(self, cell: Cell, victims: _Victims | None) -> int:
        if victims is None:
            return cell.size - cell.n_block
        return cell.size - cell.n_block + victims.extra(cell)

    @staticmethod
    def _usable(leaf: Cell, victims: _Victims | None) -> bool:
        if leaf.bad or leaf.foreign is not None:
            return False
        if leaf.job is None or leaf.opp:
            return True
        return victims is not None and leaf.job in victims

    def _pick_in(
        self, cell: Cell, g: int, lo: int, hi: int, victims: _Victims | None
    ) -> tuple[tuple[int, int, int], list[Cell]] | None:
        """Best g GPUs inside a bound cell, within one sub-cell of level lo..hi (tightest first)."""
        if self._avail(cell, victims) < g:
            return None
        for lv in range(lo, min(hi, cell.level) + 1):
            best: tuple[tuple[int, int, int], Cell] | None = None
            for sub in cell.by_level[lv]:
                a = self._avail(sub, victims)
                if a < g:
                    continue
                if victims is None:
                    key = (lv, min(sub.n_opp, max(0, g - (a - sub.n_opp))), a - g)
                else:  # rare path: preempting within the VC, price the victims
                    key = (lv, sum(self._leaf_cost(lf) for lf in self._cheapest(sub, g, victims)), a - g)
                if best is None or key < best[0]:
                    best = (key, sub)
                    if key[1] == 0 and key[2] == 0:
                        break
            if best is not None:
                return best[0], self._cheapest(best[1], g, victims)
        return None

    def _leaf_cost(self, leaf: Cell) -> int:
        """Free GPUs first, then opportunistic ones, then those of the lowest-priority victims."""
        if leaf.job is None:
            return 0
        if leaf.opp:
            return 1
        return 2 + self._jobs[leaf.job].priority

    def _cheapest(self, cell: Cell, g: int, victims: _Victims | None) -> list[Cell]:
        usable = [lf for lf in cell.leaves if self._usable(lf, victims)]
        usable.sort(key=self._leaf_cost)
        return usable[:g]

    def _place_guaranteed(
        self, req: Request, chain: str, n: int, g: int, undo: list[tuple[str, Any]], victims: _Victims | None
    ) -> tuple[list[Cell], set[str]]:
        if n == 1:
            leaves = self._place_single(req, chain, g, undo, victims)
        else:
            leaves = self._place_multi(req, chain, n, g, undo, victims)
        preempt = {lf.job for lf in leaves if lf.job is not None}
        return leaves, preempt  # type: ignore[return-value]

    def _place_single(
        self, req: Request, chain: str, g: int, undo: list[tuple[str, Any]], victims: _Victims | None
    ) -> list[Cell]:
        ch = self.spec.chains[chain]
        v = self.vcs[req.vc]
        lmin = self._min_level(chain, g)
        hi = ch.node_level
        if req.within:
            hi = min(hi, self.spec.cell_types[req.within].level)
        bind_notes: list[str] = []
        for lv in range(lmin, ch.top_level + 1):
            if not v.total[chain][lv]:
                continue
            best: tuple[tuple[int, int, int, int], list[Cell]] | None = None
            if victims is not None:
                # the second pass: only cells holding victims can offer more than the first pass saw
                pool: Iterable[Cell] = (c for c in v.bound[chain][lv].values() if victims.extra(c))
            else:
                pool = v.roomy[chain][lv].values()
            for cell in pool:
                got = self._pick_in(cell, g, lmin, hi, victims)
                if got is None:
                    continue
                key = (*got[0], cell.id)  # ties go to tree order, whatever the history
                if best is None or key < best[0]:
                    best = (key, got[1])
            if best is not None:
                return best[1]
            if v.unbound[chain][lv] > 0:
                new_cell = self._try_bind(req.vc, chain, lv, bind_notes, undo)
                if new_cell is None:
                    continue
                cell = new_cell
                got = self._pick_in(cell, g, lmin, hi, victims)
                if got is not None:
                    return got[1]
        raise _Wait(self._single_reason(req, chain, g, lmin, bind_notes))

    def _single_reason(self, req: Request, chain: str, g: int, lmin: int, notes: list[str]) -> str:
        ch = self.spec.chains[chain]
        v = self.vcs[req.vc]
        parts = []
        for lv in range(lmin, ch.top_level + 1):
            if not v.total[chain][lv]:
                continue
            tname = ch.type_at(lv)
            bound = list(v.bound[chain][lv].values())
            most = max(
                (self._largest_block(c, ch.node_level) for c in v.roomy[chain][lv].values()), default=0
            )
            txt = f"{len(bound)} of {v.total[chain][lv]} {tname} cells in use"
            if bound:
                txt += f" (at most {most} GPUs free together on one node)"
            parts.append(txt)
        msg = f"VC {req.vc} has no room for {g} GPU{'s' if g > 1 else ''} on one node: {'; '.join(parts)}"
        if notes:
            msg += "; " + notes[0]
        elif any(c.n_bad for lst in v.bound[chain] for c in lst.values()):
            msg += f"; some GPUs of its cells are unusable{self._bad_note(chain)}"
        return msg

    def _largest_block(self, cell: Cell, node_level: int) -> int:
        lv = min(cell.level, node_level)
        return max((c.size - c.n_block for c in cell.by_level[lv]), default=0)

    def _node_slots(self, cells: Iterable[Cell]) -> list[Cell]:
        out: list[Cell] = []
        for c in cells:
            out.extend(c.node_cells)
        return out

    def _mask(self, node: Cell, victims: _Victims | None, opp_mode: bool = False) -> int:
        m = 0
        for lf in node.leaves:
            ok = (
                (lf.bcell is None and lf.job is None and not lf.bad and lf.foreign is None)
                if opp_mode
                else self._usable(lf, victims)
            )
            if ok:
                m |= 1 << lf.index
        return m

    def _choose_symmetric(
        self,
        slots: Iterable[Cell],
        n: int,
        g: int,
        lmin: int,
        fresh: int,
        victims: _Victims | None,
        opp_mode: bool = False,
        proto: Cell | None = None,
    ) -> tuple[int, list[Cell]] | None:
        """Pick GPU indices S (|S| = g) usable on n distinct nodes: slots (usable now) first, fresh ones after.

        Returns (S as a bit mask, the slot nodes used); the caller binds fresh nodes for the rest.
        Slots are scanned in order and the scan stops at the first S that n slots share, so
        callers list preferred nodes first.
        """
        fit: dict[int, list[Cell]] = {}
        if fresh and proto is not None:
            # fresh nodes are wholly free: any sub-cell's first g GPUs will do there
            for sub in proto.by_level[lmin]:
                fit.setdefault(sum(1 << lf.index for lf in sub.leaves[:g]), [])
        seen: list[tuple[Cell, int]] = []
        for s in slots:
            if g == s.size:
                # whole nodes: no index choice to make, only "is the node wholly usable"
                if (s.n_optblock if opp_mode else self._blocked(s, victims)) == 0:
                    full = fit.setdefault(sum(1 << lf.index for lf in s.leaves), [])
                    full.append(s)
                    if len(full) >= n:
                        return next(iter(k for k, v in fit.items() if v is full)), full[:n]
                continue
            if (s.size - s.n_optblock if opp_mode else self._avail(s, victims)) < g:
                continue
            m = self._mask(s, victims, opp_mode)
            for S, lst in fit.items():
                if m & S == S:
                    lst.append(s)
                    if len(lst) >= n:
                        return S, lst[:n]
            for sub in s.by_level[lmin]:
                picked = [lf.index for lf in sub.leaves if m >> lf.index & 1]
                if len(picked) >= g:
                    S = sum(1 << i for i in picked[:g])
                    if S not in fit:
                        fit[S] = [t for t, tm in seen if tm & S == S] + [s]
                        if len(fit[S]) >= n:
                            return S, fit[S][:n]
            seen.append((s, m))
        best = max(fit.items(), key=lambda kv: len(kv[1]), default=None)
        if best is None or len(best[1]) + fresh < n:
            return None
        return best[0], best[1]

    def _blocked(self, node: Cell, victims: _Victims | None) -> int:
        return node.n_block if victims is None else node.size - self._avail(node, victims)

    def _place_multi(
        self, req: Request, chain: str, n: int, g: int, undo: list[tuple[str, Any]], victims: _Victims | None
    ) -> list[Cell]:
        ch = self.spec.chains[chain]
        v = self.vcs[req.vc]
        lmin = self._min_level(chain, g)
        node_level = ch.node_level
        notes: list[str] = []
        if req.within:
            wl = self.spec.cell_types[req.within].level
            # each W sub-cell of a bound VC cell is a separate pool; then a fresh W-or-larger cell
            for lv in range(wl, ch.top_level + 1):
                for cell in v.bound[chain][lv].values():
                    for w in cell.by_level[wl]:
                        got = self._choose_symmetric(w.node_cells, n, g, lmin, 0, victims)
                        if got is not None:
                            return self._leaves_of(got[0], got[1])
            for lv in range(wl, ch.top_level + 1):
                if v.unbound[chain][lv] > 0:
                    new_cell = self._try_bind(req.vc, chain, lv, notes, undo)
                    if new_cell is None:
                        continue
                    cell = new_cell
                    w = cell.by_level[wl][0]
                    got = self._choose_symmetric(w.node_cells, n, g, lmin, 0, victims)
                    if got is not None:
                        return self._leaves_of(got[0], got[1])
            raise _Wait(self._multi_reason(req, chain, n, g, lmin, notes, within=req.within))
        # a single VC cell that can hold the whole job, lowest level first
        for lv in range(node_level + 1, ch.top_level + 1):
            if not v.total[chain][lv] or self.spec.cell_types[ch.type_at(lv)].nodes < n:
                continue
            for cell in v.bound[chain][lv].values():
                got = self._choose_symmetric(cell.node_cells, n, g, lmin, 0, victims)
                if got is not None:
                    return self._leaves_of(got[0], got[1])
            if v.unbound[chain][lv] > 0:
                new_cell = self._try_bind(req.vc, chain, lv, notes, undo)
                if new_cell is None:
                    continue
                cell = new_cell
                got = self._choose_symmetric(cell.node_cells, n, g, lmin, 0, victims)
                if got is not None:
                    return self._leaves_of(got[0], got[1])
                self._rollback([("bind", cell)])
                undo.pop()
        # nodes gathered from all the VC's node-or-larger cells, bound ones first, then fresh ones
        bound_cells = [c for lv in range(node_level, ch.top_level + 1) for c in v.bound[chain][lv].values()]
        slots = self._node_slots(bound_cells)
        fresh = sum(
            v.unbound[chain][lv] * self.spec.cell_types[ch.type_at(lv)].nodes
            for lv in range(node_level, ch.top_level + 1)
        )
        proto = self.tree.nodes_of_chain[chain][0]
        got = self._choose_symmetric(slots, n, g, lmin, fresh, victims, proto=proto)
        if got is None:
            raise _Wait(self._multi_reason(req, chain, n, g, lmin, notes))
        S, used = got
        used = list(used)
        lv = node_level
        while len(used) < n:
            while lv <= ch.top_level and v.unbound[chain][lv] == 0:
                lv += 1
            if lv > ch.top_level:
                raise _Wait(self._multi_reason(req, chain, n, g, lmin, notes))
            new_cell = self._try_bind(req.vc, chain, lv, notes, undo)
            if new_cell is None:
                lv += 1
                continue
            cell = new_cell
            for node in cell.node_cells:
                if len(used) < n and self._mask(node, victims) & S == S:
                    used.append(node)
        return self._leaves_of(S, used)

    def _leaves_of(self, S: int, nodes: list[Cell]) -> list[Cell]:
        return [lf for node in nodes for lf in node.leaves if S >> lf.index & 1]

    def _multi_reason(
        self, req: Request, chain: str, n: int, g: int, lmin: int, notes: list[str], within: str | None = None
    ) -> str:
        ch = self.spec.chains[chain]
        v = self.vcs[req.vc]
        free_nodes = 0
        partial = 0
        for lv in range(ch.node_level, ch.top_level + 1):
            k = self.spec.cell_types[ch.type_at(lv)].nodes
            free_nodes += v.unbound[chain][lv] * k
            for cell in v.bound[chain][lv].values():
                for node in cell.node_cells:
                    a = node.size - node.n_block
                    if a == node.size:
                        free_nodes += 1
                    elif a >= g:
                        partial += 1
        node_type = ch.type_at(ch.node_level)
        if notes and free_nodes >= n:
            return f"VC {req.vc} has {free_nodes} free {node_type} cells for the {n} nodes the job needs, but {notes[0]}"
        if within:
            msg = f"VC {req.vc} has no free {within} with {n} nodes of {g} free GPUs at the same indices"
        else:
            msg = f"VC {req.vc} has {free_nodes} free {node_type} cells but the job needs {n} nodes"
            if partial:
                msg += (
                    f"; {partial} more of its nodes have {g} GPUs free, but not at the same GPU indices "
                    f"on enough nodes (a multi-node job needs the same GPUs on every node)"
                )
        if notes:
            msg += "; " + notes[0]
        return msg

    # ---- opportunistic, on unbound free GPUs anywhere
    def _place_opportunistic(self, req: Request, chain: str, n: int, g: int) -> tuple[list[Cell], set[str]]:
        ch = self.spec.chains[chain]
        lmin = self._min_level(chain, g)
        hi = ch.node_level
        if req.within:
            hi = min(hi, self.spec.cell_types[req.within].level)
        nodes = self.tree.nodes_of_chain[chain]
        if n == 1:
            best: tuple[tuple[int, int, int], Cell] | None = None
            for node in nodes:
                if node.size - node.n_optblock < g:
                    continue
                busy = 1 if node.n_g else 0  # keep away from nodes with guaranteed work
                for lv in range(lmin, hi + 1):
                    found = None
                    for sub in node.by_level[lv]:
                        a = sub.size - sub.n_optblock
                        if a >= g and (found is None or a < found[0]):
                            found = (a, sub)
                    if found is not None:
                        key = (lv, busy, found[0] - g)
                        if best is None or key < best[0]:
                            best = (key, found[1])
                        break
                if best is not None and best[0][0] == lmin and best[0][1] == 0:
                    break
            if best is None:
                raise _Wait(
                    f"no {g} {chain} GPUs are free and unreserved together on one node for an opportunistic job"
                )
            leaves = [
                lf
                for lf in best[1].leaves
                if lf.bcell is None and lf.job is None and not lf.bad and lf.foreign is None
            ]
            return leaves[:g], set()
        if req.within:
            wl = self.spec.cell_types[req.within].level
            for top in self.tree.tops:
                if top.chain != chain or top.level < wl:
                    continue
                for w in top.by_level[wl]:
                    got = self._choose_symmetric(w.node_cells, n, g, lmin, 0, None, opp_mode=True)
                    if got is not None:
                        return self._leaves_of(*got), set()
        else:
            # nodes without guaranteed work first
            ordered = itertools.chain((c for c in nodes if not c.n_g), (c for c in nodes if c.n_g))
            got = self._choose_symmetric(ordered, n, g, lmin, 0, None, opp_mode=True)
            if got is not None:
                return self._leaves_of(*got), set()
        raise _Wait(
            f"no {n} {chain} nodes have {g} free unreserved GPUs at the same indices for an opportunistic job"
        )

    # ======================================================================== release & events
    def release(self, job_id: str) -> None:
        """Release a job's GPUs. A waiting or preempted job is released once without error."""
        if job_id in self._jobs:
            for cell in self._release_job(job_id):
                self._unbind_if_idle(cell)
        elif job_id in self._ended:
            self._ended.discard(job_id)
        elif job_id in self._released:
            raise UnknownJobError(f"job {job_id} was already released")
        else:
            raise UnknownJobError(f"unknown job {job_id}")
        self._released.add(job_id)

    def _unbind_if_idle(self, cell: Cell) -> None:
        if cell.n_g == 0 and cell.bound_vc is not None:
            self._unbind(cell)

    def _release_job(self, job_id: str) -> list[Cell]:
        """Free the job's GPUs; return the bound cells it used (the caller unbinds the idle ones)."""
        job = self._jobs.pop(job_id)
        del self._vc_jobs[job.vc][job_id]
        touched: dict[int, Cell] = {}
        for leaf in job.leaves:
            if leaf.bcell is not None and job.priority >= 0:
                touched[leaf.bcell.id] = leaf.bcell
            self._set_leaf(leaf, job=None, opp=False)
        return list(touched.values())

    def _node(self, node: str) -> Cell:
        cell = self.tree.node_cell.get(node)
        if cell is None:
            raise UnknownNodeError(f"unknown node {node}")
        return cell

    def set_node_bad(self, node: str) -> None:
        for leaf in self._node(node).leaves:
            self._set_leaf(leaf, bad=True)

    def set_node_healthy(self, node: str) -> None:
        for leaf in self._node(node).leaves:
            self._set_leaf(leaf, bad=False)

    def bad_nodes(self) -> list[str]:
        return [n for n, c in self.tree.node_cell.items() if any(lf.bad for lf in c.leaves)]

    def occupy_foreign(self, tag: str, node: str, gpu_indices: Iterable[int]) -> None:
        """GPUs busy with work hivebatch did not place: never used for new work until released."""
        cell = self._node(node)
        leaves = []
        for i in gpu_indices:
            leaf = self.tree.leaf.get((node, i))
            if leaf is None:
                raise UnknownNodeError(
                    f"node {node} has no GPU {i} (it has {sorted(lf.index for lf in cell.leaves)})"
                )
            leaves.append(leaf)
        for leaf in leaves:
            self._set_leaf(leaf, foreign=tag)
        self._foreign.setdefault(tag, []).extend(leaves)

    def release_foreign(self, tag: str) -> None:
        for leaf in self._foreign.pop(tag, []):
            if leaf.foreign == tag:
                self._set_leaf(leaf, foreign=None)

    def foreign(self) -> dict[str, dict[str, list[int]]]:
        out: dict[str, dict[str, list[int]]] = {}
        for tag, leaves in self._foreign.items():
            d: dict[str, list[int]] = {}
            for lf in leaves:
                assert lf.node is not None
                d.setdefault(lf.node, []).append(lf.index)
            out[tag] = {k: sorted(v) for k, v in d.items()}
        return out

    # ======================================================================== adopt
    def adopt(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> Decision:
        """Re-create a job at a known physical placement (after a restart, or a job Slurm started).

        Guaranteed jobs bind the VC cells that contain their GPUs (lowest VC level first, bad nodes
        allowed since the job already runs there); opportunistic jobs on those GPUs are preempted.
        """
        if vc not in self.vcs:
            return Decision("rejected", error=f"unknown VC {vc} (known: {', '.join(self.vcs) or 'none'})")
        if job_id in self._jobs:
            return Decision("rejected", error=f"job {job_id} already holds GPUs")
        leaves: list[Cell] = []
        for node, idx in placement.items():
            if node not in self.tree.node_cell:
                return Decision("rejected", error=f"unknown node {node}")
            for i in idx:
                leaf = self.tree.leaf.get((node, int(i)))
                if leaf is None:
                    return Decision("rejected", error=f"node {node} has no GPU {i}")
                leaves.append(leaf)
        if not leaves:
            return Decision("rejected", error="an adopted job needs at least one GPU")
        chains = {lf.chain for lf in leaves}
        if len(chains) > 1:
            return Decision(
                "rejected", error=f"job {job_id} spans several GPU types ({', '.join(sorted(chains))})"
            )
        chain = chains.pop()
        for lf in leaves:
            if lf.job is not None and not lf.opp:
                return Decision("rejected", error=f"{lf.node} GPU {lf.index} is already used by job {lf.job}")
            if lf.job is not None and priority < 0:
                return Decision("rejected", error=f"{lf.node} GPU {lf.index} is already used by job {lf.job}")
        undo: list[tuple[str, Any]] = []
        if priority >= 0:
            try:
                self._adopt_bind(vc, chain, leaves, undo)
            except _Wait as exc:
                self._rollback(undo)
                return Decision("rejected", error=str(exc))
        preempted = sorted({lf.job for lf in leaves if lf.job is not None})  # type: ignore[type-var]
        for jid in preempted:
            self._release_job(jid)  # opportunistic: binds nothing
            self._ended.add(jid)
        job = _Job(job_id, vc, priority, chain, leaves)
        for leaf in leaves:
            self._set_leaf(leaf, job=job_id, opp=priority < 0)
        self._jobs[job_id] = job
        self._vc_jobs[vc][job_id] = job
        state = job.state()
        return Decision("placed", placement=state.placement, preempted=preempted, gpu_type=chain)

    def _adopt_bind(self, vc: str, chain: str, leaves: list[Cell], undo: list[tuple[str, Any]]) -> None:
        v = self.vcs[vc]
        ch = self.spec.chains[chain]
        for leaf in leaves:
            if leaf.bcell is not None and leaf.bcell.bound_vc != vc:
                raise _Wait(f"{leaf.node} GPU {leaf.index} lies in a cell bound to VC {leaf.bcell.bound_vc}")
        # per node, the GPUs not yet in one of the VC's bound cells must share one new binding:
        # the lowest VC level at or above their common ancestor whose cell is still free
        groups: dict[str, list[Cell]] = {}
        for leaf in leaves:
            if leaf.bcell is None:
                groups.setdefault(str(leaf.node), []).append(leaf)
        for node, group in groups.items():
            group = [lf for lf in group if lf.bcell is None]  # an earlier group's rack may cover it
            if not group:
                continue
            anc: Cell | None = self._common_ancestor(group)
            while anc is not None:
                if v.unbound[chain][anc.level] > 0 and self.buddy.free_ancestor(anc) is not None:
                    self.buddy.take_specific(anc)
                    v.unbound[chain][anc.level] -= 1
                    self.demand[chain][anc.level] -= 1
                    self._mark_bound(anc, vc)
                    undo.append(("bind", anc))
                    break
                anc = anc.parent
            if anc is None:
                gpus = ",".join(str(lf.index) for lf in group)
                raise _Wait(
                    f"VC {vc} has no free cell containing {node} GPUs {gpus} "
                    f"(its {ch.name} cells: {self._cells_text(vc, chain)})"
                )

    @staticmethod
    def _common_ancestor(cells: list[Cell]) -> Cell:
        first = cells[0]
        ids = [c.id for c in cells]
        anc: Cell | None = first
        while anc is not None:
            inside = {lf.id for lf in anc.leaves}
            if all(i in inside for i in ids):
                return anc
            anc = anc.parent
        raise AssertionError("cells of one chain always share the top cell's ancestor line")

    # ======================================================================== views
    def jobs(self) -> dict[str, JobState]:
        return {jid: j.state() for jid, j in self._jobs.items()}

    def gpu_map(self) -> dict[str, dict[int, GpuUse]]:
        out: dict[str, dict[int, GpuUse]] = {}
        for node, cell in self.tree.node_cell.items():
            row: dict[int, GpuUse] = {}
            for lf in cell.leaves:
                vc = lf.bcell.bound_vc if lf.bcell is not None else None
                if lf.job is not None and lf.opp:
                    vc = self._jobs[lf.job].vc
                row[lf.index] = GpuUse(
                    vc=vc, job=lf.job, opportunistic=lf.opp, bad=lf.bad, foreign=lf.foreign is not None
                )
            out[node] = row
        return out

    def shortfall(self) -> dict[str, dict[str, int]]:
        """Free VC cells per VC and cell type that no healthy physical cell can back right now."""
        out: dict[str, dict[str, int]] = {v: {} for v in self.vcs}
        for cname, ch in self.spec.chains.items():
            if self._feasible(cname, self.demand[cname]):
                continue
            for vname, row in self._chain_shortfall(cname).items():
                for lv, k in enumerate(row):
                    if k:
                        out[vname][ch.type_at(lv)] = k
        return out

    def vc_view(self, vc: str, _short: dict[str, dict[str, int]] | None = None) -> VCView:
        if vc not in self.vcs:
            raise UnknownVCError(f"unknown VC {vc} (known: {', '.join(self.vcs)})")
        v = self.vcs[vc]
        short = (_short if _short is not None else self.shortfall())[vc]
        cells: dict[str, CellTypeView] = {}
        total = used = lost = 0
        for tname in self.spec.vcs[vc].cells:
            ct = self.spec.cell_types[tname]
            n_total = v.total[ct.chain][ct.level]
            bound = list(v.bound[ct.chain][ct.level].values())
            unavailable = short.get(tname, 0)
            for cell in bound:
                used += cell.n_g
                lost += sum(1 for lf in cell.leaves if (lf.bad or lf.foreign is not None) and lf.job is None)
            lost += unavailable * ct.gpus
            total += n_total * ct.gpus
            cells[tname] = CellTypeView(
                cell_type=tname,
                total=n_total,
                bound=len(bound),
                free=n_total - len(bound),
                unavailable=unavailable,
                gpus_per_cell=ct.gpus,
            )
        reason = None
        if lost:
            what = [f"{k} of its free {t} cells" for t, k in short.items()]
            bits = []
            if what:
                bits.append(f"{', '.join(what)} cannot be backed by healthy hardware")
            in_bound = lost - sum(k * self.spec.cell_types[t].gpus for t, k in short.items())
            if in_bound:
                bits.append(f"{in_bound} GPUs in its bound cells are bad or busy with outside work")
            notes = "".join(self._bad_note(c) for c in self.spec.vc_chains(vc))
            reason = f"capacity reduced by {lost} GPUs: {'; '.join(bits)}{notes}"
        opp = sum(len(j.leaves) for j in self._jobs.values() if j.vc == vc and j.priority < 0)
        return VCView(
            vc=vc,
            cells=cells,
            gpus_total=total,
            gpus_used=used,
            gpus_free=total - used - lost,
            capacity=total - lost,
            reason=reason,
            opportunistic_gpus=opp,
            jobs=sum(1 for j in self._jobs.values() if j.vc == vc),
        )

    def vc_views(self) -> dict[str, VCView]:
        short = self.shortfall()
        return {v: self.vc_view(v, short) for v in self.vcs}

    def free_cells(self) -> dict[str, dict[str, int]]:
        """Physical free cells per chain and type (buddy free lists, healthy or not)."""
        out: dict[str, dict[str, int]] = {}
        for cname, ch in self.spec.chains.items():
            out[cname] = {
                ch.type_at(lv): len(self.buddy.clean[cname][lv]) + len(self.buddy.other[cname][lv])
                for lv in range(1, ch.top_level + 1)
            }
        return out

    def bindings(self) -> list[dict[str, Any]]:
        out = []
        for vname, v in self.vcs.items():
            for cname in v.bound:
                for lst in v.bound[cname]:
                    for cell in lst.values():
                        out.append(
                            {
                                "vc": vname,
                                "type": cell.type,
                                "nodes": list(cell.nodes),
                                "gpus": self._cell_gpus(cell),
                            }
                        )
        return out

    @staticmethod
    def _cell_gpus(cell: Cell) -> dict[str, list[int]]:
        d: dict[str, list[int]] = {}
        for lf in cell.leaves:
            assert lf.node is not None
            d.setdefault(lf.node, []).append(lf.index)
        return d

    # ======================================================================== persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "bad_nodes": self.bad_nodes(),
            "foreign": self.foreign(),
            "bindings": self.bindings(),
            "jobs": [
                {"job_id": s.job_id, "vc": s.vc, "priority": s.priority, "placement": s.placement}
                for s in (j.state() for j in self._jobs.values())
            ],
        }

    @classmethod
    def restore(cls, spec: ClusterSpec, snap: dict[str, Any]) -> CellAllocator:
        if not isinstance(snap, dict) or snap.get("version") != SNAPSHOT_VERSION:
            from hivebatch.errors import HivebatchError

            raise HivebatchError(
                f"cannot restore a cell snapshot of version {snap.get('version') if isinstance(snap, dict) else '?'}"
            )
        alloc = cls(spec, check=False)
        for b in snap.get("bindings", []):
            # re-take exactly the same physical cell so the VC view is the same as before; bindings
            # the current config cannot hold (node, type or VC gone) are skipped
            try:
                first_node = next(iter(b["gpus"]))
                leaf: Cell | None = alloc.tree.leaf.get((first_node, int(b["gpus"][first_node][0])))
                ct = spec.cell_types.get(b["type"])
                v = alloc.vcs.get(b["vc"])
            except (KeyError, TypeError, ValueError, StopIteration, IndexError):
                continue
            if leaf is None or ct is None or v is None or ct.chain != leaf.chain:
                continue
            cell: Cell | None = leaf
            while cell is not None and cell.level < ct.level:
                cell = cell.parent
            if cell is None or v.unbound[cell.chain][ct.level] <= 0 or not alloc.buddy.take_specific(cell):
                continue
            v.unbound[cell.chain][ct.level] -= 1
            alloc.demand[cell.chain][ct.level] -= 1
            alloc._mark_bound(cell, b["vc"])
        for j in snap.get("jobs", []):
            # a job the current config cannot hold comes back "rejected" and is left out; the
            # caller reconciles it with what Slurm says
            alloc.adopt(
                str(j["job_id"]),
                str(j["vc"]),
                int(j["priority"]),
                {k: list(x) for k, x in j["placement"].items()},
            )
        # bindings without a job (should not exist) are given back
        for v in alloc.vcs.values():
            for lst in v.bound.values():
                for lvl in lst:
                    for cell in list(lvl.values()):
                        if cell.n_g == 0:
                            alloc._unbind(cell)
        for node in snap.get("bad_nodes", []):
            if node in alloc.tree.node_cell:
                alloc.set_node_bad(node)
        for tag, where in snap.get("foreign", {}).items():
            for node, idx in where.items():
                if node in alloc.tree.node_cell:
                    alloc.occupy_foreign(tag, node, idx)
        return alloc

    # ======================================================================== self-check
    def check_invariants(self) -> None:
        """Raise AssertionError when internal state is inconsistent (used by tests and the soak)."""
        seen: set[int] = set()
        for vname, v in self.vcs.items():
            for cname, ch in self.spec.chains.items():
                for lv in range(1, ch.top_level + 1):
                    nb = len(v.bound[cname][lv])
                    assert nb + v.unbound[cname][lv] == v.total[cname][lv], (vname, cname, lv)
                    assert v.unbound[cname][lv] >= 0
                    for cell in v.bound[cname][lv].values():
                        assert cell.bound_vc == vname
                        assert not cell.free
                        assert cell.n_g > 0, f"{cell} bound to {vname} while idle"
                        assert (cell.id in v.roomy[cname][lv]) == (cell.n_block < cell.size), (
                            f"{cell} roomy index"
                        )
                        for lf in cell.leaves:
                            assert lf.id not in seen, f"GPU {lf} bound twice"
                            seen.add(lf.id)
                            assert lf.bcell is cell
        tally: dict[int, dict[str, int]] = {}
        for jid, job in self._jobs.items():
            if job.priority >= 0:
                for lf in job.leaves:
                    assert lf.bcell is not None
                    row = tally.setdefault(lf.bcell.id, {})
                    row[jid] = row.get(jid, 0) + 1
        assert tally == self._cell_jobs, "per-cell job tally out of date"
        for jid, job in self._jobs.items():
            for lf in job.leaves:
                assert lf.job == jid
                if job.priority >= 0:
                    assert lf.bcell is not None and lf.bcell.bound_vc == job.vc, (
                        f"{jid} outside its VC's cells"
                    )
        # free lists at the highest level: no cell listed with all buddies listed too
        for cname in self.spec.chains:
            for lv, bucket in enumerate(self.buddy.clean[cname]):
                for cell in [*bucket.values(), *self.buddy.other[cname][lv].values()]:
                    assert cell.free
                    p = cell.parent
                    assert p is None or not all(s.free for s in p.children), (
                        f"{cell} and its buddies not merged"
                    )
                    a = p
                    while a is not None:
                        assert not a.free and a.bound_vc is None, f"{cell} listed inside {a}"
                        a = a.parent
                    for lf in cell.leaves:
                        assert lf.bcell is None
