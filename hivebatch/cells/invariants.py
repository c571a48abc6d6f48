"""The allocator's self-check: every count, index and free list agrees with the cells (tests, soak)."""

from __future__ import annotations

from hivebatch.cells.state import CellState


def check_invariants(st: CellState) -> None:
    """Raise AssertionError when internal state is inconsistent."""
    _check_bindings(st)
    _check_jobs(st)
    _check_free_lists(st)


def _check_bindings(st: CellState) -> None:
    seen: set[int] = set()
    for vname, v in st.vcs.items():
        for cname, ch in st.spec.chains.items():
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


def _check_jobs(st: CellState) -> None:
    tally: dict[int, dict[str, int]] = {}
    for jid, job in st.placed.items():
        if job.priority >= 0:
            for lf in job.leaves:
                assert lf.bcell is not None
                row = tally.setdefault(lf.bcell.id, {})
                row[jid] = row.get(jid, 0) + 1
    assert tally == st.cell_jobs, "per-cell job tally out of date"
    for jid, job in st.placed.items():
        for lf in job.leaves:
            assert lf.job == jid
            if job.priority >= 0:
                assert lf.bcell is not None and lf.bcell.bound_vc == job.vc, f"{jid} outside its VC's cells"


def _check_free_lists(st: CellState) -> None:
    """Free lists at the highest level: no cell listed with all buddies listed too."""
    for cname in st.spec.chains:
        for lv, bucket in enumerate(st.buddy.clean[cname]):
            for cell in [*bucket.values(), *st.buddy.other[cname][lv].values()]:
                assert cell.free
                p = cell.parent
                assert p is None or not all(s.free for s in p.children), f"{cell} and its buddies not merged"
                a = p
                while a is not None:
                    assert not a.free and a.bound_vc is None, f"{cell} listed inside {a}"
                    a = a.parent
                for lf in cell.leaves:
                    assert lf.bcell is None
