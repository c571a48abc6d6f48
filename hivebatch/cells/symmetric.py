"""Multi-node placement: the same GPU indices on n nodes (Slurm's ``--gres`` is per node).

A guaranteed job looks in one VC cell that can hold it whole, then gathers nodes from all the VC's
bound cells and binds fresh cells for the rest; an opportunistic job looks at unbound free GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable

from hivebatch.cells.binding import BindLog, try_bind
from hivebatch.cells.shape import min_level
from hivebatch.cells.state import CellState, Wait
from hivebatch.cells.tree import Cell
from hivebatch.cells.types import Request
from hivebatch.cells.victims import Victims, avail, blocked, lost_work, usable


def mask(node: Cell, victims: Victims | None, opp_mode: bool = False) -> int:
    """The node's usable GPUs as a bit mask of their indices."""
    m = 0
    for lf in node.leaves:
        ok = (
            (lf.bcell is None and lf.job is None and not lf.bad and lf.foreign is None)
            if opp_mode
            else usable(lf, victims)
        )
        if ok:
            m |= 1 << lf.index
    return m


def leaves_of(S: int, nodes: list[Cell]) -> list[Cell]:
    return [lf for node in nodes for lf in node.leaves if S >> lf.index & 1]


def choose_symmetric(
    slots: Iterable[Cell],
    n: int,
    g: int,
    lmin: int,
    fresh: int,
    victims: Victims | None,
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
            if (s.n_optblock if opp_mode else blocked(s, victims)) == 0:
                full = fit.setdefault(sum(1 << lf.index for lf in s.leaves), [])
                full.append(s)
                if len(full) >= n:
                    return next(iter(k for k, v in fit.items() if v is full)), full[:n]
            continue
        if (s.size - s.n_optblock if opp_mode else avail(s, victims)) < g:
            continue
        m = mask(s, victims, opp_mode)
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


def place_multi(
    st: CellState, req: Request, chain: str, n: int, g: int, log: BindLog, victims: Victims | None
) -> list[Cell]:
    """n nodes x g GPUs in the VC's cells, binding cells as needed; raise Wait with the reason."""
    search = _MultiNode(st, req, chain, n, g, log, victims)
    if req.within:
        return search.within(req.within)
    got = search.in_one_cell()
    if got is not None:
        return got
    return search.gather_nodes()


class _MultiNode:
    """One guaranteed multi-node request on one chain, inside its VC's cells."""

    def __init__(
        self, st: CellState, req: Request, chain: str, n: int, g: int, log: BindLog, victims: Victims | None
    ) -> None:
        self.st, self.req, self.chain, self.n, self.g = st, req, chain, n, g
        self.log, self.victims = log, victims
        self.ch = st.spec.chains[chain]
        self.v = st.vcs[req.vc]
        self.lmin = min_level(st, chain, g)
        self.notes: list[str] = []  # why bindings failed, for the wait reason

    def _least_loss_first(self, nodes: Iterable[Cell]) -> Iterable[Cell]:
        """Nodes whose jobs that would be preempted lose the least work first (order kept otherwise)."""
        if not self.st.at_stake:
            return nodes
        return sorted(
            nodes,
            key=lambda node: lost_work(
                self.st, [lf for lf in node.leaves if lf.job and usable(lf, self.victims)]
            ),
        )

    def _choose(self, nodes: Iterable[Cell]) -> list[Cell] | None:
        nodes = self._least_loss_first(nodes)
        got = choose_symmetric(nodes, self.n, self.g, self.lmin, 0, self.victims)
        return None if got is None else leaves_of(got[0], got[1])

    def _bind(self, level: int) -> Cell | None:
        return try_bind(self.st, self.req.vc, self.chain, level, self.notes, self.log)

    def _wait(self, within: str | None = None) -> Wait:
        return Wait(multi_reason(self.st, self.req, self.chain, self.n, self.g, self.notes, within=within))

    def within(self, within: str) -> list[Cell]:
        """Each W sub-cell of a bound VC cell is a separate pool; then a fresh W-or-larger cell."""
        chain, top = self.chain, self.ch.top_level
        wl = self.st.spec.cell_types[within].level
        for lv in range(wl, top + 1):
            for cell in self.v.bound[chain][lv].values():
                for w in cell.by_level[wl]:
                    got = self._choose(w.node_cells)
                    if got is not None:
                        return got
        for lv in range(wl, top + 1):
            if self.v.unbound[chain][lv] > 0:
                new_cell = self._bind(lv)
                if new_cell is None:
                    continue
                got = self._choose(new_cell.by_level[wl][0].node_cells)
                if got is not None:
                    return got
        raise self._wait(within)

    def in_one_cell(self) -> list[Cell] | None:
        """A single VC cell that can hold the whole job, lowest level first."""
        ch, chain, v = self.ch, self.chain, self.v
        for lv in range(ch.node_level + 1, ch.top_level + 1):
            if not v.total[chain][lv] or self.st.spec.cell_types[ch.type_at(lv)].nodes < self.n:
                continue
            for cell in v.bound[chain][lv].values():
                got = self._choose(cell.node_cells)
                if got is not None:
                    return got
            if v.unbound[chain][lv] > 0:
                mark = self.log.checkpoint()
                new_cell = self._bind(lv)
                if new_cell is None:
                    continue
                got = self._choose(new_cell.node_cells)
                if got is not None:
                    return got
                self.log.rollback(mark)
        return None

    def gather_nodes(self) -> list[Cell]:
        """Nodes gathered from all the VC's node-or-larger cells, bound ones first, then fresh ones."""
        ch, chain, v, n = self.ch, self.chain, self.v, self.n
        levels = range(ch.node_level, ch.top_level + 1)
        slots = [node for lv in levels for c in v.bound[chain][lv].values() for node in c.node_cells]
        slots = list(self._least_loss_first(slots))
        fresh = sum(v.unbound[chain][lv] * self.st.spec.cell_types[ch.type_at(lv)].nodes for lv in levels)
        proto = self.st.tree.nodes_of_chain[chain][0]
        got = choose_symmetric(slots, n, self.g, self.lmin, fresh, self.victims, proto=proto)
        if got is None:
            raise self._wait()
        S, used = got
        used = list(used)
        lv = ch.node_level
        while len(used) < n:
            while lv <= ch.top_level and v.unbound[chain][lv] == 0:
                lv += 1
            if lv > ch.top_level:
                raise self._wait()
            new_cell = self._bind(lv)
            if new_cell is None:
                lv += 1
                continue
            for node in new_cell.node_cells:
                if len(used) < n and mask(node, self.victims) & S == S:
                    used.append(node)
        return leaves_of(S, used)


def multi_reason(
    st: CellState, req: Request, chain: str, n: int, g: int, notes: list[str], within: str | None = None
) -> str:
    ch = st.spec.chains[chain]
    v = st.vcs[req.vc]
    free_nodes = 0
    partial = 0
    for lv in range(ch.node_level, ch.top_level + 1):
        k = st.spec.cell_types[ch.type_at(lv)].nodes
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
