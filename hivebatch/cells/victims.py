"""Which GPUs a request may use: free ones, opportunistic ones, and those of jobs it may preempt.

The searches (search.py, symmetric.py) ask these questions for every cell they look at, with
``victims`` None on the first pass (no guaranteed job is preempted) and set on the second.
"""

from __future__ import annotations

from hivebatch.cells.state import CellState, Job
from hivebatch.cells.tree import Cell


class Victims:
    """Jobs a higher-priority job may preempt: lower-priority guaranteed jobs of its VC and GPU type.

    Membership is tested against the VC's job table (no set is built); usable GPUs per cell are
    counted on demand and cached for the one request.
    """

    def __init__(
        self, vc_jobs: dict[str, Job], priority: int, chain: str, cell_jobs: dict[int, dict[str, int]]
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


def avail(cell: Cell, victims: Victims | None) -> int:
    """GPUs of the cell a guaranteed request can use."""
    if victims is None:
        return cell.size - cell.n_block
    return cell.size - cell.n_block + victims.extra(cell)


def blocked(node: Cell, victims: Victims | None) -> int:
    return node.n_block if victims is None else node.size - avail(node, victims)


def usable(leaf: Cell, victims: Victims | None) -> bool:
    if leaf.bad or leaf.foreign is not None:
        return False
    if leaf.job is None or leaf.opp:
        return True
    return victims is not None and leaf.job in victims


def leaf_cost(st: CellState, leaf: Cell) -> int:
    """Free GPUs first, then opportunistic ones, then those of the lowest-priority victims."""
    if leaf.job is None:
        return 0
    if leaf.opp:
        return 1
    return 2 + st.placed[leaf.job].priority


def lost_work(st: CellState, leaves: list[Cell]) -> float:
    """GPU-seconds the jobs on ``leaves`` would lose if preempted now, each job counted once (taking
    one of its GPUs ends its whole run)."""
    jobs = {lf.job for lf in leaves if lf.job is not None}
    return sum(st.at_stake.get(j, 0.0) for j in jobs)


def cheapest(st: CellState, cell: Cell, g: int, victims: Victims | None) -> list[Cell]:
    """The ``g`` usable GPUs of the cell that cost the least to take: free ones, then by class, then
    the victims losing the least work (a job's GPUs side by side, so one victim gives all it has)."""
    usable_leaves = [lf for lf in cell.leaves if usable(lf, victims)]
    usable_leaves.sort(
        key=lambda lf: (leaf_cost(st, lf), st.at_stake.get(lf.job, 0.0) if lf.job else 0.0, lf.job or "")
    )
    return usable_leaves[:g]
