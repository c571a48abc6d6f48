"""Binding VC cells to physical cells: the safety check, bind and unbind, and a log to undo a trial.

A VC cell is bound to a healthy physical cell of its level only while a guaranteed job of the VC
uses a GPU in it (HiveD's cell_allocation). A binding is refused when it would leave other VCs'
free cells without healthy hardware to back them (Theorem 1 on healthy hardware; with bad hardware
the shortfall is charged to VCs in a fixed order and a binding may not shift it onto another VC).
"""

from __future__ import annotations

from hivebatch.cells.capacity import level_capacity
from hivebatch.cells.state import CellState, Wait
from hivebatch.cells.tree import Cell
from hivebatch.cells.victims import lost_work


class BindLog:
    """The cells a trial placement bound, in order, so that it can be undone exactly.

    Like KAI Scheduler's Statement: :meth:`checkpoint` marks a point, :meth:`rollback` unbinds the
    cells bound since then that no job has started to use. Binding is the only operation a trial
    makes on the state (GPUs are taken only once a placement is committed), so an entry is the cell.
    """

    def __init__(self, state: CellState) -> None:
        self._state = state
        self._cells: list[Cell] = []

    def record(self, cell: Cell) -> None:
        self._cells.append(cell)

    def checkpoint(self) -> int:
        return len(self._cells)

    def rollback(self, to: int = 0) -> None:
        """Undo the bindings made since checkpoint ``to`` (all of them by default), newest first."""
        for cell in reversed(self._cells[to:]):
            unbind_if_idle(self._state, cell)
        del self._cells[to:]

    def cells(self) -> list[Cell]:
        return list(self._cells)


# ---------------------------------------------------------------- the safety check
def feasible(st: CellState, chain: str) -> bool:
    """Whether the healthy free physical cells can back every unbound VC cell of the chain."""
    return all(
        needed <= available
        for _lv, available, needed in level_capacity(
            st.spec, chain, st.buddy.healthy[chain], st.demand[chain]
        )
    )


def chain_shortfall(st: CellState, chain: str) -> dict[str, list[int]]:
    """Per VC and level: free VC cells no healthy free physical cell can back.

    Top-down as in the load-time check, against healthy free cells; a shortage at a level is
    charged to the VCs in reverse config order (the first VCs of the config keep their cells).
    """
    top = st.spec.chains[chain].top_level
    out = {v: [0] * (top + 1) for v in st.vcs}
    for lv, available, needed in level_capacity(st.spec, chain, st.buddy.healthy[chain], st.demand[chain]):
        short = max(0, needed - available)
        for vname in st.charge_order:
            if not short:
                break
            take = min(short, st.vcs[vname].unbound[chain][lv])
            out[vname][lv] = take
            short -= take
    return out


def _no_shortfall(st: CellState, chain: str) -> dict[str, list[int]]:
    return {v: [0] * (st.spec.chains[chain].top_level + 1) for v in st.vcs}


def _no_worse(before: dict[str, list[int]], after: dict[str, list[int]], requester: str) -> bool:
    return all(
        a <= b for v, row in after.items() if v != requester for a, b in zip(row, before[v], strict=True)
    )


def shortfall_now(st: CellState, chain: str) -> dict[str, list[int]] | None:
    """What bindings must not make worse for other VCs: None when every VC cell can be backed."""
    return None if feasible(st, chain) else chain_shortfall(st, chain)


def others_kept(st: CellState, chain: str, vc: str, before: dict[str, list[int]] | None) -> bool:
    """After bindings for ``vc``: every other VC's cells are as backed as ``before`` (shortfall_now)."""
    return feasible(st, chain) or _no_worse(
        before if before is not None else _no_shortfall(st, chain), chain_shortfall(st, chain), vc
    )


# ---------------------------------------------------------------- bind and unbind
def try_bind(st: CellState, vc: str, chain: str, level: int, notes: list[str], log: BindLog) -> Cell | None:
    """bind, recorded in ``log`` so a failed placement can unbind it; None (and why, in ``notes``)
    when no healthy physical cell can back it."""
    try:
        cell = bind(st, vc, chain, level)
    except Wait as exc:
        notes.append(str(exc))
        return None
    log.record(cell)
    return cell


def bind(st: CellState, vc: str, chain: str, level: int) -> Cell:
    """Bind one unbound level-``level`` cell of the VC to a healthy physical cell, or raise Wait."""
    v = st.vcs[vc]
    assert v.unbound[chain][level] > 0
    # Theorem 1 holds by construction on healthy hardware. With bad hardware some VC must come
    # up short; the shortfall is charged in a fixed order (see chain_shortfall()), and a binding
    # that would shift it onto another VC is refused.
    # (A split made while nodes were bad can leave a guarantee unbacked after they recover, so
    # this is checked whenever the chain is short, not only while hardware is bad.)
    with st.unmasked():
        before = shortfall_now(st, chain)
    tname = st.spec.chains[chain].type_at(level)
    cands = st.buddy.candidates(chain, level)
    if st.at_stake:
        # of the cells whose opportunistic jobs would be preempted, the one whose jobs lose the least
        cands.sort(key=lambda c: (c.level, _opportunistic_loss(st, c)))
    if not cands:
        raise Wait(f"no healthy free {tname} cell is left to bind{st.bad_note(chain)}")
    for start in cands:
        cell = st.buddy.take(start, level)
        v.unbound[chain][level] -= 1
        st.demand[chain][level] -= 1
        with st.unmasked():
            kept = others_kept(st, chain, vc, before)
        if kept:
            mark_bound(st, cell, vc)
            return cell
        v.unbound[chain][level] += 1
        st.demand[chain][level] += 1
        st.buddy.give_back(cell)
    if before is not None and any(before[vc]):
        raise Wait(
            f"VC {vc}'s free cells cannot all be backed by healthy hardware right now, and the healthy "
            f"free cells left keep other VCs' guarantees{st.bad_note(chain)}"
        )
    raise Wait(
        f"the healthy free cells left are needed to keep other VCs' guarantees, so no {tname} "
        f"can be bound for VC {vc}{st.bad_note(chain)}"
    )


def _opportunistic_loss(st: CellState, cell: Cell) -> float:
    return lost_work(st, [lf for lf in cell.leaves if lf.opp]) if cell.n_opp else 0.0


def bind_exactly(st: CellState, cell: Cell, vc: str) -> bool:
    """Bind this very physical cell to one of the VC's unbound cells of its level, without the
    safety check (the GPUs are already in use, or were bound before a restart); False when the VC
    has no unbound cell of that level or the cell is not free."""
    v = st.vcs[vc]
    if v.unbound[cell.chain][cell.level] <= 0 or not st.buddy.take_specific(cell):
        return False
    v.unbound[cell.chain][cell.level] -= 1
    st.demand[cell.chain][cell.level] -= 1
    mark_bound(st, cell, vc)
    return True


def mark_bound(st: CellState, cell: Cell, vc: str) -> None:
    cell.bound_vc = vc
    st.vcs[vc].bound[cell.chain][cell.level][cell.id] = cell
    _set_bcell(cell, cell)
    st.file_roomy(cell)


def _set_bcell(cell: Cell, value: Cell | None) -> None:
    """(Un)bind every GPU of a cell at once: recount the subtree, then pass the delta upward.

    A bound cell has no free ancestor, so no free list is touched.
    """
    old = cell.n_optblock
    for leaf in cell.leaves:
        leaf.bcell = value
        leaf.n_optblock = (
            1 if (value is not None or leaf.job is not None or leaf.bad or leaf.foreign is not None) else 0
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


def unbind(st: CellState, cell: Cell) -> None:
    vc = cell.bound_vc
    assert vc is not None
    _set_bcell(cell, None)
    cell.bound_vc = None
    v = st.vcs[vc]
    del v.bound[cell.chain][cell.level][cell.id]
    v.roomy[cell.chain][cell.level].pop(cell.id, None)
    v.unbound[cell.chain][cell.level] += 1
    st.demand[cell.chain][cell.level] += 1
    st.buddy.give_back(cell)


def unbind_if_idle(st: CellState, cell: Cell) -> None:
    if cell.n_g == 0 and cell.bound_vc is not None:
        unbind(st, cell)


# ---------------------------------------------------------------- binding around a known placement
def bind_around(st: CellState, vc: str, chain: str, leaves: list[Cell], log: BindLog) -> None:
    """Bind the VC cells that contain GPUs a job already uses (adoption), or raise Wait.

    Per node, the GPUs not yet in one of the VC's bound cells must share one new binding: the
    lowest VC level at or above their common ancestor whose cell is still free. Bad nodes are
    allowed: the job already runs there.
    """
    v = st.vcs[vc]
    for leaf in leaves:
        if leaf.bcell is not None and leaf.bcell.bound_vc != vc:
            raise Wait(f"{leaf.node} GPU {leaf.index} lies in a cell bound to VC {leaf.bcell.bound_vc}")
    groups: dict[str, list[Cell]] = {}
    for leaf in leaves:
        if leaf.bcell is None:
            groups.setdefault(str(leaf.node), []).append(leaf)
    for node, group in groups.items():
        group = [lf for lf in group if lf.bcell is None]  # an earlier group's rack may cover it
        if not group:
            continue
        anc: Cell | None = _common_ancestor(group)
        while anc is not None:
            if v.unbound[chain][anc.level] > 0 and st.buddy.free_ancestor(anc) is not None:
                bind_exactly(st, anc, vc)
                log.record(anc)
                break
            anc = anc.parent
        if anc is None:
            gpus = ",".join(str(lf.index) for lf in group)
            raise Wait(
                f"VC {vc} has no free cell containing {node} GPUs {gpus} "
                f"(its {chain} cells: {st.cells_text(vc, chain)})"
            )


def _common_ancestor(cells: list[Cell]) -> Cell:
    ids = [c.id for c in cells]
    anc: Cell | None = cells[0]
    while anc is not None:
        inside = {lf.id for lf in anc.leaves}
        if all(i in inside for i in ids):
            return anc
        anc = anc.parent
    raise AssertionError("cells of one chain always share the top cell's ancestor line")
