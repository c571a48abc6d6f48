"""Buddy cell allocation over the physical tree: free lists per chain and level, split and merge.

Free cells are always listed at the highest level possible. Each list is kept in two buckets so
that the common choice is O(1): ``clean`` cells (healthy, no opportunistic GPUs) and ``other``
cells, which are scanned for the one with the fewest opportunistic GPUs. For the safety check the
allocator also keeps, per chain and level, how many *healthy* free cells there are when free cells
holding bad hardware are decomposed into their largest healthy parts.
"""

from __future__ import annotations

from hivebatch.cells.spec import ClusterSpec
from hivebatch.cells.tree import Cell, PhysicalTree


class Buddy:
    def __init__(self, spec: ClusterSpec, tree: PhysicalTree) -> None:
        self.spec = spec
        self.tree = tree
        self.clean: dict[str, list[dict[int, Cell]]] = {}
        self.other: dict[str, list[dict[int, Cell]]] = {}
        self.healthy: dict[str, list[int]] = {}  # healthy free cells per level (index = level)
        for name, chain in spec.chains.items():
            self.clean[name] = [{} for _ in range(chain.top_level + 1)]
            self.other[name] = [{} for _ in range(chain.top_level + 1)]
            self.healthy[name] = [0] * (chain.top_level + 1)
        for top in tree.tops:
            self.add_free(top)

    # ---- free lists -------------------------------------------------------------------------
    def _bucket(self, cell: Cell) -> dict[int, Cell]:
        if cell.n_bad == 0 and cell.n_opp == 0:
            return self.clean[cell.chain][cell.level]
        return self.other[cell.chain][cell.level]

    def decomposition(self, cell: Cell) -> tuple[int, ...]:
        """Healthy cells per level obtainable from this (free) cell; cached until health changes."""
        if cell.decomp is None:
            vec = [0] * (self.spec.chains[cell.chain].top_level + 1)
            if cell.n_bad == 0:
                vec[cell.level] = 1
            else:
                for ch in cell.children:
                    for lv, n in enumerate(self.decomposition(ch)):
                        vec[lv] += n
            cell.decomp = tuple(vec)
        return cell.decomp

    def add_free(self, cell: Cell) -> None:
        cell.free = True
        cell.split = False
        self._bucket(cell)[cell.id] = cell
        h = self.healthy[cell.chain]
        for lv, n in enumerate(self.decomposition(cell)):
            if n:
                h[lv] += n

    def remove_free(self, cell: Cell) -> None:
        cell.free = False
        self._bucket(cell).pop(cell.id, None)
        h = self.healthy[cell.chain]
        for lv, n in enumerate(self.decomposition(cell)):
            if n:
                h[lv] -= n

    def before_change(self, cell: Cell) -> None:
        """Call before a counter of a free cell changes (it may move bucket or decomposition)."""
        self.remove_free(cell)

    def after_change(self, cell: Cell) -> None:
        self.add_free(cell)

    def free_ancestor(self, cell: Cell) -> Cell | None:
        c: Cell | None = cell
        while c is not None:
            if c.free:
                return c
            c = c.parent
        return None

    # ---- allocation ------------------------------------------------------------------------
    def _has_healthy_at(self, cell: Cell, level: int) -> bool:
        if cell.n_bad == 0:
            return True
        return any(c.n_bad == 0 for c in cell.by_level[level])

    def candidates(self, chain: str, level: int) -> list[Cell]:
        """Free cells that can yield a healthy level-``level`` cell, best first.

        Lowest level first (plain buddy allocation); at a level, prefer splitting cells that already
        hold bad hardware (their healthy parts are worth less whole), then the fewest opportunistic
        GPUs. Only a few candidates are returned: the caller tries them in order.
        """
        out: list[Cell] = []
        top = self.spec.chains[chain].top_level
        for lv in range(level, top + 1):
            clean = self.clean[chain][lv]
            others = [
                c
                for c in self.other[chain][lv].values()
                if (c.n_bad == 0 if lv == level else self._has_healthy_at(c, level))
            ]
            if lv == level:
                others.sort(key=lambda c: (c.n_opp, c.id))
                if clean:
                    # lowest id = tree order: deterministic whatever the history of the lists
                    out.append(clean[min(clean)])
                out.extend(others[:4])
            else:
                others.sort(key=lambda c: (c.n_bad == 0, c.n_opp, c.id))
                broken = [c for c in others if c.n_bad > 0]
                rest = [c for c in others if c.n_bad == 0]
                out.extend(broken[:3])
                if clean:
                    out.append(clean[min(clean)])
                out.extend(rest[:3])
            if len(out) >= 4:
                break
        return out

    def take(self, start: Cell, level: int) -> Cell:
        """Remove free ``start`` and split it down to a healthy level-``level`` cell; return that cell."""
        self.remove_free(start)
        cell = start
        while cell.level > level:
            cell.split = True
            kids = [c for c in cell.children if self._has_healthy_at(c, level)]
            kids.sort(key=lambda c: (c.n_bad == 0, c.n_opp))
            chosen = kids[0]
            for ch in cell.children:
                if ch is not chosen:
                    self.add_free(ch)
            cell = chosen
        return cell

    def take_specific(self, cell: Cell) -> bool:
        """Take exactly this cell (restoring a known binding); False if it is not free."""
        anc = self.free_ancestor(cell)
        if anc is None:
            return False
        self.remove_free(anc)
        path: list[Cell] = []
        c: Cell | None = cell
        while c is not None and c is not anc:
            path.append(c)
            c = c.parent
        # split from anc down to cell, freeing the siblings along the way
        cur = anc
        for nxt in reversed(path):
            cur.split = True
            for ch in cur.children:
                if ch is not nxt:
                    self.add_free(ch)
            cur = nxt
        return True

    def give_back(self, cell: Cell) -> None:
        """Release a cell and merge buddies upward while all of them are free."""
        cur = cell
        while cur.parent is not None and all(s.free for s in cur.parent.children if s is not cur):
            parent = cur.parent
            for s in parent.children:
                if s is not cur:
                    self.remove_free(s)
            cur.split = False
            cur = parent
        self.add_free(cur)
