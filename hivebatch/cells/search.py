"""The placement search (HiveD's topology-aware scheduler): where a request's GPUs go, or why it waits.

A guaranteed request is looked for in its VC's cells, first without preempting anyone, then, when
that fails and the VC runs lower-priority jobs of the same GPU type, again with those as victims.
An opportunistic request takes free GPUs that no VC has bound, away from guaranteed work where it
can. The search binds VC cells as it goes (recorded in a :class:`BindLog`); it takes no GPU: the
allocator commits the placement or rolls the bindings back.
"""

from __future__ import annotations

import itertools

from hivebatch.cells.binding import BindLog, try_bind
from hivebatch.cells.shape import check_vc_can_hold, min_level
from hivebatch.cells.state import CellState, Wait
from hivebatch.cells.symmetric import choose_symmetric, leaves_of, place_multi
from hivebatch.cells.tree import Cell
from hivebatch.cells.types import Request
from hivebatch.cells.victims import Victims, avail, cheapest, leaf_cost, lost_work


def place(
    st: CellState, req: Request, chain: str, n: int, g: int, log: BindLog
) -> tuple[list[Cell], set[str]]:
    """The GPUs for the request on ``chain`` and the jobs it preempts; raise Wait or Reject."""
    if req.priority < 0:
        return place_opportunistic(st, req, chain, n, g), set()
    check_vc_can_hold(st, req, chain, n, g)
    try:
        return _place_guaranteed(st, req, chain, n, g, log, victims=None)
    except Wait as first:
        victims = Victims(st.vc_jobs[req.vc], req.priority, chain, st.cell_jobs)
        if not victims.any():
            raise
        log.rollback()
        try:
            return _place_guaranteed(st, req, chain, n, g, log, victims=victims)
        except Wait:
            raise first from None


def _place_guaranteed(
    st: CellState, req: Request, chain: str, n: int, g: int, log: BindLog, victims: Victims | None
) -> tuple[list[Cell], set[str]]:
    if n == 1:
        leaves = place_single(st, req, chain, g, log, victims)
    else:
        leaves = place_multi(st, req, chain, n, g, log, victims)
    preempt = {lf.job for lf in leaves if lf.job is not None}
    return leaves, preempt


# ---------------------------------------------------------------- guaranteed, on one node
Key = tuple[int, int, float, int]  # level, victims' class cost, work they lose, GPUs left over


def pick_in(
    st: CellState, cell: Cell, g: int, lo: int, hi: int, victims: Victims | None
) -> tuple[Key, list[Cell]] | None:
    """Best g GPUs inside a bound cell, within one sub-cell of level lo..hi (tightest first; among
    sub-cells that need victims, the ones whose victims lose the least work)."""
    if avail(cell, victims) < g:
        return None
    for lv in range(lo, min(hi, cell.level) + 1):
        best: tuple[Key, Cell] | None = None
        for sub in cell.by_level[lv]:
            a = avail(sub, victims)
            if a < g:
                continue
            key: Key
            if victims is None:
                opp = min(sub.n_opp, max(0, g - (a - sub.n_opp)))
                lost = lost_work(st, cheapest(st, sub, g, None)) if opp and st.at_stake else 0.0
                key = (lv, opp, lost, a - g)
            else:  # rare path: preempting within the VC, price the victims
                taken = cheapest(st, sub, g, victims)
                key = (lv, sum(leaf_cost(st, lf) for lf in taken), lost_work(st, taken), a - g)
            if best is None or key < best[0]:
                best = (key, sub)
                if key[1] == 0 and key[3] == 0:
                    break
        if best is not None:
            return best[0], cheapest(st, best[1], g, victims)
    return None


def place_single(
    st: CellState, req: Request, chain: str, g: int, log: BindLog, victims: Victims | None
) -> list[Cell]:
    """g GPUs on one node in the VC's cells: packed into bound cells first, else a fresh binding."""
    ch = st.spec.chains[chain]
    v = st.vcs[req.vc]
    lmin = min_level(st, chain, g)
    hi = ch.node_level
    if req.within:
        hi = min(hi, st.spec.cell_types[req.within].level)
    if victims is not None:
        return _place_single_preempting(st, req, chain, g, lmin, hi, victims)
    bind_notes: list[str] = []
    for lv in range(lmin, ch.top_level + 1):
        if not v.total[chain][lv]:
            continue
        best: tuple[tuple[int, int, float, int, int], list[Cell]] | None = None
        for cell in v.roomy[chain][lv].values():
            got = pick_in(st, cell, g, lmin, hi, None)
            if got is None:
                continue
            key = (*got[0], cell.id)  # ties go to tree order, whatever the history
            if best is None or key < best[0]:
                best = (key, got[1])
        if best is not None:
            return best[1]
        if v.unbound[chain][lv] > 0:
            new_cell = try_bind(st, req.vc, chain, lv, bind_notes, log)
            if new_cell is None:
                continue
            got = pick_in(st, new_cell, g, lmin, hi, None)
            if got is not None:
                return got[1]
    raise Wait(single_reason(st, req, chain, g, lmin, bind_notes))


def _place_single_preempting(
    st: CellState, req: Request, chain: str, g: int, lmin: int, hi: int, victims: Victims
) -> list[Cell]:
    """The second pass of ``place_single``: only bound cells holding victims can offer more than the first
    pass saw (a fresh binding holds none). Unlike free GPUs, victims are compared across the levels of the
    VC's cells: the placement's own topology first, then the victims' class and the work they lose, so a
    job is not preempted for sitting in a smaller cell when one that loses less runs in a larger one
    (taking a victim's GPUs leaves the cells as full as they were)."""
    v = st.vcs[req.vc]
    best: tuple[tuple[int, int, float, int, int, int], list[Cell]] | None = None
    for lv in range(lmin, st.spec.chains[chain].top_level + 1):
        if not v.total[chain][lv]:
            continue
        for cell in v.bound[chain][lv].values():
            got = pick_in(st, cell, g, lmin, hi, victims) if victims.extra(cell) else None
            if got is not None:
                key = (*got[0], lv, cell.id)
                if best is None or key < best[0]:
                    best = (key, got[1])
    if best is None:
        raise Wait(single_reason(st, req, chain, g, lmin, []))
    return best[1]


def single_reason(st: CellState, req: Request, chain: str, g: int, lmin: int, notes: list[str]) -> str:
    ch = st.spec.chains[chain]
    v = st.vcs[req.vc]
    parts = []
    for lv in range(lmin, ch.top_level + 1):
        if not v.total[chain][lv]:
            continue
        tname = ch.type_at(lv)
        bound = list(v.bound[chain][lv].values())
        most = max((_largest_block(c, ch.node_level) for c in v.roomy[chain][lv].values()), default=0)
        txt = f"{len(bound)} of {v.total[chain][lv]} {tname} cells in use"
        if bound:
            txt += f" (at most {most} GPUs free together on one node)"
        parts.append(txt)
    msg = f"VC {req.vc} has no room for {g} GPU{'s' if g > 1 else ''} on one node: {'; '.join(parts)}"
    if notes:
        msg += "; " + notes[0]
    elif any(c.n_bad for lst in v.bound[chain] for c in lst.values()):
        msg += f"; some GPUs of its cells are unusable{st.bad_note(chain)}"
    return msg


def _largest_block(cell: Cell, node_level: int) -> int:
    lv = min(cell.level, node_level)
    return max((c.size - c.n_block for c in cell.by_level[lv]), default=0)


# ---------------------------------------------------------------- opportunistic, on unbound free GPUs
def place_opportunistic(st: CellState, req: Request, chain: str, n: int, g: int) -> list[Cell]:
    lmin = min_level(st, chain, g)
    if n == 1:
        return _opportunistic_single(st, req, chain, g, lmin)
    nodes = st.tree.nodes_of_chain[chain]
    if req.within:
        wl = st.spec.cell_types[req.within].level
        for top in st.tree.tops:
            if top.chain != chain or top.level < wl:
                continue
            for w in top.by_level[wl]:
                got = choose_symmetric(w.node_cells, n, g, lmin, 0, None, opp_mode=True)
                if got is not None:
                    return leaves_of(*got)
    else:
        # nodes without guaranteed work first
        ordered = itertools.chain((c for c in nodes if not c.n_g), (c for c in nodes if c.n_g))
        got = choose_symmetric(ordered, n, g, lmin, 0, None, opp_mode=True)
        if got is not None:
            return leaves_of(*got)
    raise Wait(
        f"no {n} {chain} nodes have {g} free unreserved GPUs at the same indices for an opportunistic job"
    )


def _opportunistic_single(st: CellState, req: Request, chain: str, g: int, lmin: int) -> list[Cell]:
    hi = st.spec.chains[chain].node_level
    if req.within:
        hi = min(hi, st.spec.cell_types[req.within].level)
    best: tuple[tuple[int, int, int], Cell] | None = None
    for node in st.tree.nodes_of_chain[chain]:
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
        raise Wait(
            f"no {g} {chain} GPUs are free and unreserved together on one node for an opportunistic job"
        )
    leaves = [
        lf
        for lf in best[1].leaves
        if lf.bcell is None and lf.job is None and not lf.bad and lf.foreign is None
    ]
    return leaves[:g]
