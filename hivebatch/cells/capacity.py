"""Cells per level, counted top-down: what is left at a level splits into cells of the level below.

One count serves the load-time feasibility check, the allocator's safety check on healthy free
cells, its shortfall per VC, and ``hivebatch cells check``'s capacity table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from hivebatch.cells.spec import ClusterSpec, InfeasibleConfigError


def level_capacity(
    spec: ClusterSpec, chain: str, have: Sequence[int], need: Sequence[int]
) -> Iterator[tuple[int, int, int]]:
    """(level, available, needed) for each level of ``chain``, from the top level down.

    ``have[lv]`` and ``need[lv]`` are cells of level ``lv`` (index 0 unused). ``available`` is the
    level's own cells plus the splits of the cells left over above; a level that comes up short
    leaves nothing over, so the levels below count from their own cells.
    """
    ch = spec.chains[chain]
    leftover = 0
    for lv in range(ch.top_level, 0, -1):
        available = leftover + have[lv]
        needed = need[lv]
        yield lv, available, needed
        leftover = max(0, available - needed)
        if lv > 1:
            leftover *= spec.cell_types[ch.type_at(lv)].count


def physical_counts(spec: ClusterSpec) -> dict[str, dict[int, int]]:
    """Top-level physical cells per chain and level."""
    out: dict[str, dict[int, int]] = {c: {} for c in spec.chains}
    for pc in spec.physical_cells:
        ct = spec.cell_types[pc.type]
        out[ct.chain][ct.level] = out[ct.chain].get(ct.level, 0) + 1
    return out


def vc_demand(spec: ClusterSpec) -> dict[str, dict[int, int]]:
    """The VCs' cells per chain and level, summed over VCs."""
    out: dict[str, dict[int, int]] = {c: {} for c in spec.chains}
    for vc in spec.vcs.values():
        for tname, n in vc.cells.items():
            ct = spec.cell_types[tname]
            out[ct.chain][ct.level] = out[ct.chain].get(ct.level, 0) + n
    return out


def config_capacity(spec: ClusterSpec) -> dict[str, list[tuple[int, int, int]]]:
    """level_capacity per chain of the layout as configured: every physical cell free, no VC cell bound."""
    have = physical_counts(spec)
    need = vc_demand(spec)
    out: dict[str, list[tuple[int, int, int]]] = {}
    for cname, chain in spec.chains.items():
        levels = range(chain.top_level + 1)
        out[cname] = list(
            level_capacity(
                spec,
                cname,
                [have[cname].get(lv, 0) for lv in levels],
                [need[cname].get(lv, 0) for lv in levels],
            )
        )
    return out


def check_feasibility(spec: ClusterSpec) -> None:
    """Refuse a layout whose VCs need more cells at some level than the physical cells can give."""
    for cname, rows in config_capacity(spec).items():
        for level, available, needed in rows:
            if needed > available:
                chain = spec.chains[cname]
                raise InfeasibleConfigError(cname, level, chain.type_at(level), needed, available)
