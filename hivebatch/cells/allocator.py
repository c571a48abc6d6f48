"""CellAllocator: VC cells bound dynamically to physical cells, gang placement, preemption.

Model (HiveD): a VC owns virtual cells per cell type. A virtual cell is *bound* to a physical cell
of the same level only while a guaranteed job of the VC uses a GPU in it; binding takes the
physical cell from the buddy free lists, unbinding gives it back (and merges buddies). Because
the whole physical cell is reserved while bound, the VC's view of a bound cell is the physical cell
itself. Opportunistic jobs (priority -1) run on GPUs that no VC has bound and are preempted when
a binding or a guaranteed placement needs their GPUs.

This module is the API over the state (state.py): allocate, release, adopt, node health and GPUs
busy with outside work. Binding is in binding.py, the search in search.py (and symmetric.py for
multi-node jobs), the read-only views in views.py, persistence in snapshot.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hivebatch.cells import snapshot as _snapshot
from hivebatch.cells import views
from hivebatch.cells.binding import BindLog, bind_around, others_kept, shortfall_now, unbind_if_idle
from hivebatch.cells.capacity import check_feasibility
from hivebatch.cells.invariants import check_invariants
from hivebatch.cells.notice import Hold
from hivebatch.cells.search import place
from hivebatch.cells.shape import shape, validate
from hivebatch.cells.spec import ClusterSpec
from hivebatch.cells.state import AVOIDED, CellState, Job, Reject, Wait, placement_of
from hivebatch.cells.tree import Cell
from hivebatch.cells.types import (
    Decision,
    GpuUse,
    JobState,
    Request,
    UnknownJobError,
    UnknownNodeError,
    VCView,
)

SNAPSHOT_VERSION = _snapshot.SNAPSHOT_VERSION
#: the outside-work tag of GPUs kept for a placement waiting on a notice (for one round)
NOTICE_TAG = "notice:"


class CellAllocator(CellState):
    def __init__(self, spec: ClusterSpec, *, check: bool = True) -> None:
        if check:
            check_feasibility(spec)
        super().__init__(spec)

    # ======================================================================== requests
    def allocate(self, req: Request) -> Decision:
        return self._decide(req, commit=True)

    def try_allocate(self, req: Request) -> Decision:
        """The answer allocate would give, leaving the state unchanged."""
        return self._decide(req, commit=False)

    def _decide(self, req: Request, commit: bool) -> Decision:
        if commit and self.notice is not None:
            # asked again (another shape of it, in the same round): what an earlier try told and kept
            # is decided afresh, so a shape that fits without victims warns none and keeps nothing
            self.notice.withdraw(req.job_id)
            self.release_foreign(NOTICE_TAG + req.job_id)
        if not req.avoid_nodes:
            return self._decide_on(req, commit)
        # the free GPUs of the nodes to avoid count as busy with outside work for this one request:
        # the search passes them by as it passes a foreign job's GPUs, without the guarantees bad
        # hardware would put at risk, and nothing of it outlives the request
        masked = [
            leaf
            for name in sorted(req.avoid_nodes)
            if name in self.tree.node_cell
            for leaf in self.tree.node_cell[name].leaves
            if leaf.foreign is None and leaf.job is None
        ]
        for leaf in masked:
            self.set_foreign(leaf, AVOIDED)
        self.avoid_mask = masked
        try:
            return self._decide_on(req, commit)
        finally:
            self.avoid_mask = []
            for leaf in masked:
                self.set_foreign(leaf, None)

    def _decide_on(self, req: Request, commit: bool) -> Decision:
        try:
            chains = validate(self, req)
        except Reject as exc:
            return Decision("rejected", error=str(exc))
        first_wait: tuple[str, str, int, int] | None = None
        first_reject: str | None = None
        notice: Hold | None = None  # the first chain whose victims must be told to leave first
        notice_leaves: list[Cell] = []
        for chain in chains:
            try:
                n, g = shape(self, req, chain)
            except Reject as exc:
                first_reject = first_reject or str(exc)
                continue
            log = BindLog(self)
            try:
                leaves, preempt = place(self, req, chain, n, g, log)
            except Wait as exc:
                log.rollback()
                if first_wait is None:
                    first_wait = (str(exc), chain, n, g)
                continue
            except Reject as exc:
                log.rollback()
                first_reject = first_reject or str(exc)
                continue
            hold = self.notice.hold(preempt) if self.notice is not None and preempt else None
            if hold is not None:
                log.rollback()
                if notice is None:  # a notice says more than another chain's wait
                    notice, first_wait, notice_leaves = hold, (hold.reason(), chain, n, g), leaves
                continue
            order = self.tree.node_order
            placement = placement_of(leaves)
            placement = {k: sorted(placement[k]) for k in sorted(placement, key=order.__getitem__)}
            preempted = sorted(preempt)
            if commit:
                self._commit(req, chain, leaves, preempted, log)
            else:
                log.rollback()
            return Decision(
                "placed", placement=placement, preempted=preempted, gpu_type=chain, nodes=n, gpus_per_node=g
            )
        if first_wait is None:
            return Decision("rejected", error=first_reject or f"VC {req.vc} cannot hold {req.gpus} GPUs")
        if commit:
            self.ended.add(req.job_id)
            self.released.discard(req.job_id)
            if notice is not None and self.notice is not None:
                self.notice.tell(req.job_id, notice)
                self._reserve(req.job_id, notice_leaves)
        reason, chain, n, g = first_wait
        until = notice.until if notice is not None else None
        return Decision(
            "waiting", reason=reason, gpu_type=chain, nodes=n, gpus_per_node=g, leaving_until=until
        )

    def _commit(
        self, req: Request, chain: str, leaves: list[Cell], preempted: list[str], log: BindLog
    ) -> None:
        # victims give up their GPUs first; their cells are unbound only after the new job
        # holds its GPUs, so a cell both share stays bound
        touched: list[Cell] = []
        for jid in preempted:
            touched.extend(self._release_job(jid))
            self.ended.add(jid)
        self._hold(Job(req.job_id, req.vc, req.priority, chain, leaves))
        self.ended.discard(req.job_id)
        self.released.discard(req.job_id)
        touched.extend(log.cells())
        for cell in touched:
            unbind_if_idle(self, cell)

    def _hold(self, job: Job) -> None:
        """Put the job on its GPUs and in the job tables."""
        for leaf in job.leaves:
            self.set_job(leaf, job.job_id, job.priority < 0)
        self.placed[job.job_id] = job
        # a VC the config no longer has may still own running opportunistic work (adopt)
        self.vc_jobs.setdefault(job.vc, {})[job.job_id] = job

    def _reserve(self, job_id: str, leaves: list[Cell]) -> None:
        """Keep the free GPUs of a placement that waits on a notice from the rest of the round: a victim
        that has left already must not see its GPUs go to other work (or to itself again) while the
        others finish their notice. Held as outside work, so every counter stays right."""
        tag = NOTICE_TAG + job_id
        free = [lf for lf in leaves if lf.job is None and not lf.bad and lf.foreign is None]
        for leaf in free:
            self.set_foreign(leaf, tag)
        if free:
            self.foreign_leaves.setdefault(tag, []).extend(free)

    def release_notice_holds(self) -> None:
        """Give back the GPUs kept for placements waiting on notices (done before each round)."""
        for tag in [t for t in self.foreign_leaves if t.startswith(NOTICE_TAG)]:
            self.release_foreign(tag)

    # ======================================================================== release
    def release(self, job_id: str) -> None:
        """Release a job's GPUs. A waiting or preempted job is released once without error."""
        if job_id in self.placed:
            for cell in self._release_job(job_id):
                unbind_if_idle(self, cell)
        elif job_id in self.ended:
            self.ended.discard(job_id)
        elif job_id in self.released:
            raise UnknownJobError(f"job {job_id} was already released")
        else:
            raise UnknownJobError(f"unknown job {job_id}")
        self.released.add(job_id)

    def _release_job(self, job_id: str) -> list[Cell]:
        """Free the job's GPUs; return the bound cells it used (the caller unbinds the idle ones)."""
        job = self.placed.pop(job_id)
        del self.vc_jobs[job.vc][job_id]
        touched: dict[int, Cell] = {}
        for leaf in job.leaves:
            if leaf.bcell is not None and job.priority >= 0:
                touched[leaf.bcell.id] = leaf.bcell
            self.set_job(leaf, None, False)
        return list(touched.values())

    # ======================================================================== health and outside work
    def _node(self, node: str) -> Cell:
        cell = self.tree.node_cell.get(node)
        if cell is None:
            raise UnknownNodeError(f"unknown node {node}")
        return cell

    def set_node_bad(self, node: str) -> None:
        for leaf in self._node(node).leaves:
            self.set_bad(leaf, True)

    def set_node_healthy(self, node: str) -> None:
        for leaf in self._node(node).leaves:
            self.set_bad(leaf, False)

    def bad_nodes(self) -> list[str]:
        return views.bad_nodes(self)

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
            self.set_foreign(leaf, tag)
        self.foreign_leaves.setdefault(tag, []).extend(leaves)

    def release_foreign(self, tag: str) -> None:
        for leaf in self.foreign_leaves.pop(tag, []):
            if leaf.foreign == tag:
                self.set_foreign(leaf, None)

    def foreign(self) -> dict[str, dict[str, list[int]]]:
        return views.foreign(self)

    # ======================================================================== adopt
    def adopt(
        self,
        job_id: str,
        vc: str,
        priority: int,
        placement: dict[str, list[int]],
        *,
        keep_guarantees: bool = False,
    ) -> Decision:
        """Re-create a job at a known physical placement (after a restart, or a job Slurm started).

        Guaranteed jobs bind the VC cells that contain their GPUs (lowest VC level first, bad nodes
        allowed since the job already runs there); opportunistic jobs on those GPUs are preempted.
        ``keep_guarantees`` (a placement hivebatch chooses, as a requeued job's): refuse it when its
        bindings would leave another VC's free cells without physical cells to bind, as the buddy
        search never does; a job that already runs is adopted regardless.
        """
        try:
            leaves = self._adoptable(job_id, vc, priority, placement)
        except Reject as exc:
            return Decision("rejected", error=str(exc))
        chain = leaves[0].chain
        if priority >= 0:
            before = shortfall_now(self, chain) if keep_guarantees else None
            log = BindLog(self)
            try:
                bind_around(self, vc, chain, leaves, log)
            except Wait as exc:
                log.rollback()
                return Decision("rejected", error=str(exc))
            if keep_guarantees and not others_kept(self, chain, vc, before):
                log.rollback()
                where = ", ".join(sorted(placement))
                return Decision(
                    "rejected",
                    error=f"its VC's cells on {where} would leave another VC's guaranteed cells without GPUs",
                )
        preempted = sorted({lf.job for lf in leaves if lf.job is not None})
        for jid in preempted:
            self._release_job(jid)  # opportunistic: binds nothing
            self.ended.add(jid)
        job = Job(job_id, vc, priority, chain, leaves)
        self._hold(job)
        return Decision("placed", placement=job.state().placement, preempted=preempted, gpu_type=chain)

    def _adoptable(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> list[Cell]:
        """The GPUs of a placement to adopt, or Reject saying why it cannot be."""
        if vc not in self.vcs and priority >= 0:
            # opportunistic work binds no cell: a removed VC's running jobs may stay on idle GPUs
            raise Reject(f"unknown VC {vc} (known: {', '.join(self.vcs) or 'none'})")
        if job_id in self.placed:
            raise Reject(f"job {job_id} already holds GPUs")
        leaves: list[Cell] = []
        for node, idx in placement.items():
            if node not in self.tree.node_cell:
                raise Reject(f"unknown node {node}")
            for i in idx:
                leaf = self.tree.leaf.get((node, int(i)))
                if leaf is None:
                    raise Reject(f"node {node} has no GPU {i}")
                leaves.append(leaf)
        if not leaves:
            raise Reject("an adopted job needs at least one GPU")
        chains = {lf.chain for lf in leaves}
        if len(chains) > 1:
            raise Reject(f"job {job_id} spans several GPU types ({', '.join(sorted(chains))})")
        for lf in leaves:
            if lf.job is not None and (not lf.opp or priority < 0):
                raise Reject(f"{lf.node} GPU {lf.index} is already used by job {lf.job}")
        return leaves

    # ======================================================================== views
    def jobs(self) -> dict[str, JobState]:
        return views.jobs(self)

    def gpu_map(self) -> dict[str, dict[int, GpuUse]]:
        return views.gpu_map(self)

    def sibling_cell(self, node: str, index: int) -> set[int]:
        """The GPUs of the smallest cell above GPU ``index`` of ``node`` (its PCIe switch pair, say);
        within it every GPU is placed alike by the buddy allocator. Empty for an unknown GPU."""
        leaf = self.tree.leaf.get((node, index))
        if leaf is None or leaf.parent is None:
            return set()
        return {g.index for g in leaf.parent.leaves}

    def shortfall(self) -> dict[str, dict[str, int]]:
        """Free VC cells per VC and cell type that no healthy physical cell can back right now."""
        return views.shortfall(self)

    def vc_view(self, vc: str, _short: dict[str, dict[str, int]] | None = None) -> VCView:
        return views.vc_view(self, vc, _short)

    def vc_views(self) -> dict[str, VCView]:
        short = views.shortfall(self)
        return {v: views.vc_view(self, v, short) for v in self.vcs}

    def free_cells(self) -> dict[str, dict[str, int]]:
        """Physical free cells per chain and type (buddy free lists, healthy or not)."""
        return views.free_cells(self)

    def bindings(self) -> list[dict[str, Any]]:
        return views.bindings(self)

    # ======================================================================== persistence
    def snapshot(self) -> dict[str, Any]:
        return _snapshot.snapshot(self)

    def fork(self) -> CellAllocator:
        """A separate copy with the same bindings, jobs, bad nodes and outside work (what-if walks)."""
        return type(self).restore(self.spec, self.snapshot())

    @classmethod
    def restore(cls, spec: ClusterSpec, snap: dict[str, Any]) -> CellAllocator:
        _snapshot.check_version(snap)
        alloc = cls(spec, check=False)
        _snapshot.restore_into(alloc, snap)
        return alloc

    # ======================================================================== self-check
    def check_invariants(self) -> None:
        """Raise AssertionError when internal state is inconsistent (used by tests and the soak)."""
        check_invariants(self)
