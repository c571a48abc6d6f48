"""Read-only views of the allocator's state: jobs, GPUs, VC capacity, free cells and bindings."""

from __future__ import annotations

from typing import Any

from hivebatch.cells.binding import chain_shortfall, feasible
from hivebatch.cells.state import CellState, placement_of
from hivebatch.cells.tree import Cell
from hivebatch.cells.types import CellTypeView, GpuUse, JobState, UnknownVCError, VCView


def jobs(st: CellState) -> dict[str, JobState]:
    return {jid: j.state() for jid, j in st.placed.items()}


def gpu_map(st: CellState) -> dict[str, dict[int, GpuUse]]:
    out: dict[str, dict[int, GpuUse]] = {}
    for node, cell in st.tree.node_cell.items():
        row: dict[int, GpuUse] = {}
        for lf in cell.leaves:
            vc = lf.bcell.bound_vc if lf.bcell is not None else None
            if lf.job is not None and lf.opp:
                vc = st.placed[lf.job].vc
            row[lf.index] = GpuUse(
                vc=vc, job=lf.job, opportunistic=lf.opp, bad=lf.bad, foreign=lf.foreign is not None
            )
        out[node] = row
    return out


def bad_nodes(st: CellState) -> list[str]:
    return [n for n, c in st.tree.node_cell.items() if any(lf.bad for lf in c.leaves)]


def foreign(st: CellState) -> dict[str, dict[str, list[int]]]:
    """GPUs busy with outside work: tag -> node -> GPU indices."""
    return {
        tag: {k: sorted(v) for k, v in placement_of(leaves).items()}
        for tag, leaves in st.foreign_leaves.items()
    }


def shortfall(st: CellState) -> dict[str, dict[str, int]]:
    """Free VC cells per VC and cell type that no healthy physical cell can back right now."""
    out: dict[str, dict[str, int]] = {v: {} for v in st.vcs}
    for cname, ch in st.spec.chains.items():
        if feasible(st, cname):
            continue
        for vname, row in chain_shortfall(st, cname).items():
            for lv, k in enumerate(row):
                if k:
                    out[vname][ch.type_at(lv)] = k
    return out


def vc_view(st: CellState, vc: str, shortfalls: dict[str, dict[str, int]] | None = None) -> VCView:
    """The VC's cells and GPUs; ``shortfalls`` is :func:`shortfall` when the caller has it already."""
    if vc not in st.vcs:
        raise UnknownVCError(f"unknown VC {vc} (known: {', '.join(st.vcs)})")
    v = st.vcs[vc]
    short = (shortfalls if shortfalls is not None else shortfall(st))[vc]
    cells: dict[str, CellTypeView] = {}
    total = used = lost = 0
    for tname in st.spec.vcs[vc].cells:
        ct = st.spec.cell_types[tname]
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
    opp = sum(len(j.leaves) for j in st.placed.values() if j.vc == vc and j.priority < 0)
    return VCView(
        vc=vc,
        cells=cells,
        gpus_total=total,
        gpus_used=used,
        gpus_free=total - used - lost,
        capacity=total - lost,
        reason=_capacity_reason(st, vc, short, lost) if lost else None,
        opportunistic_gpus=opp,
        jobs=sum(1 for j in st.placed.values() if j.vc == vc),
    )


def _capacity_reason(st: CellState, vc: str, short: dict[str, int], lost: int) -> str:
    what = [f"{k} of its free {t} cells" for t, k in short.items()]
    bits = []
    if what:
        bits.append(f"{', '.join(what)} cannot be backed by healthy hardware")
    in_bound = lost - sum(k * st.spec.cell_types[t].gpus for t, k in short.items())
    if in_bound:
        bits.append(f"{in_bound} GPUs in its bound cells are bad or busy with outside work")
    notes = "".join(st.bad_note(c) for c in st.spec.vc_chains(vc))
    return f"capacity reduced by {lost} GPUs: {'; '.join(bits)}{notes}"


def free_cells(st: CellState) -> dict[str, dict[str, int]]:
    """Physical free cells per chain and type (buddy free lists, healthy or not)."""
    out: dict[str, dict[str, int]] = {}
    for cname, ch in st.spec.chains.items():
        out[cname] = {
            ch.type_at(lv): len(st.buddy.clean[cname][lv]) + len(st.buddy.other[cname][lv])
            for lv in range(1, ch.top_level + 1)
        }
    return out


def bindings(st: CellState) -> list[dict[str, Any]]:
    out = []
    for vname, v in st.vcs.items():
        for cname in v.bound:
            for lst in v.bound[cname]:
                for cell in lst.values():
                    out.append(
                        {"vc": vname, "type": cell.type, "nodes": list(cell.nodes), "gpus": _cell_gpus(cell)}
                    )
    return out


def _cell_gpus(cell: Cell) -> dict[str, list[int]]:
    return placement_of(cell.leaves)
