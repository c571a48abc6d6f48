"""Re-creating slices Slurm already runs (after a controller restart) and placing requeued slices
again on the GPU index Slurm keeps for them."""

from __future__ import annotations

from hivebatch.sharing.binpack import choose_binpack
from hivebatch.sharing.booking import LedgerBase
from hivebatch.sharing.memory import format_mib, shard_rounded_mib
from hivebatch.sharing.slices import (
    KIND_OPP,
    KIND_SHARE,
    KIND_WHOLE,
    OPP_PREFIX,
    SHARE_PREFIX,
    GpuShare,
    SliceDecision,
    cell_id,
)


class Rebuild(LedgerBase):
    # --- rebuilding from what Slurm runs ---------------------------------------------------------------

    def adopt_slice(
        self, job_id: str, vc: str, priority: int, node: str, gpu: int, mem_mib: int
    ) -> SliceDecision:
        """Re-create a slice Slurm already runs (after a controller restart)."""
        if job_id in self._slices:
            return SliceDecision(job_id, "rejected", error=f"job {job_id} already has a GPU slice")
        cap = self.node_capacity_mib(node)
        if cap is None or gpu not in self._node_gpus.get(node, []):
            return SliceDecision(
                job_id, "rejected", error=f"{node} GPU {gpu} is not a shareable GPU of the cluster"
            )
        need = shard_rounded_mib(mem_mib)
        g = self._gpus.get((node, gpu))
        if g is None:
            kind, cell = _own_cell(priority, node, gpu)
            d = self.alloc.adopt(cell, vc, priority, {node: [gpu]})
            if d.result != "placed":
                return SliceDecision(
                    job_id, "rejected", error=d.reason or getattr(d, "error", None) or "GPU busy"
                )
            g = self._share(node, gpu, cap, kind, cell, vc, priority)
        elif priority >= 0 and not (
            g.vc == vc and (g.kind == KIND_SHARE or (g.kind == KIND_WHOLE and self.config.mixed(node)))
        ):
            return SliceDecision(job_id, "rejected", error=f"{node} GPU {gpu} is not shared by VC {vc}")
        elif priority < 0 and not (g.kind == KIND_OPP or self.config.colocate.allowed(g.vc, node)):
            return SliceDecision(job_id, "rejected", error=f"{node} GPU {gpu} takes no opportunistic slices")
        if g.free_mib < need:
            return SliceDecision(
                job_id, "rejected", error=f"{node} GPU {gpu} has only {format_mib(g.free_mib)} free"
            )
        return self._book(job_id, vc, need, priority, g, [])

    def resume(
        self,
        job_id: str,
        vc: str,
        mem_mib: int,
        priority: int,
        gpu_index: int,
        nodes_first: list[str] | None = None,
        avoid: frozenset[str] = frozenset(),
    ) -> SliceDecision:
        """Place a requeued slice again on GPU ``gpu_index`` of some node: Slurm keeps its typed gres
        (``shard:g3:k``) and cannot re-type it safely, so only the node may change (never to one in
        ``avoid``)."""
        error = self._check(job_id, vc, mem_mib, None)
        if error:
            return SliceDecision(job_id, "rejected", error=error)
        need = shard_rounded_mib(mem_mib)
        order = list(nodes_first or []) + sorted(n for n in self._node_gpus if n not in (nodes_first or []))
        order = [n for n in order if n not in avoid]
        rank = {n: i for i, n in enumerate(order)}
        col = self.config.colocate
        free: dict[tuple[str, int], int] = {}
        for g in self._gpus.values():
            if g.gpu != gpu_index or g.node in avoid:
                continue
            own = priority >= 0 and g.vc == vc and g.kind == KIND_SHARE and g.priority >= priority
            if own or (priority < 0 and g.kind == KIND_OPP):
                free[(g.node, g.gpu)] = g.free_mib
            elif priority < 0 and col.allowed(g.vc, g.node) and len(g.opp_slices()) < col.max_jobs_per_gpu:
                free[(g.node, g.gpu)] = g.free_mib - col.headroom_mib
        key = choose_binpack(free, need, tie_break=lambda k: rank.get(k[0], len(rank)))
        if key is not None:
            return self._book(job_id, vc, need, priority, self._gpus[key], [])
        fresh = self._fresh_gpu(vc, need, priority, gpu_index, order)
        if fresh is not None:
            return self._book(job_id, vc, need, priority, fresh, [])
        return SliceDecision(
            job_id,
            "waiting",
            reason=f"requeued on GPU index {gpu_index}; waits until GPU {gpu_index} of some node has "
            f"{format_mib(need)} free" + (f" in VC {vc}'s cells" if priority >= 0 else ""),
        )

    def _fresh_gpu(
        self, vc: str, need: int, priority: int, gpu_index: int, order: list[str]
    ) -> GpuShare | None:
        """GPU ``gpu_index`` of the first node in ``order`` the cell core has free, now held for slices."""
        for node in order:
            if gpu_index not in self._node_gpus.get(node, []) or (node, gpu_index) in self._gpus:
                continue
            cap = self.node_capacity_mib(node)
            if not cap or cap < need:
                continue
            kind, cell = _own_cell(priority, node, gpu_index)
            use = self.alloc.gpu_map().get(node, {}).get(gpu_index)
            if use is None or use.job is not None or use.bad or use.foreign:
                continue
            d = self.alloc.adopt(cell, vc, priority, {node: [gpu_index]})
            if d.result != "placed":
                continue
            return self._share(node, gpu_index, cap, kind, cell, vc, priority)
        return None


def _own_cell(priority: int, node: str, gpu: int) -> tuple[str, str]:
    """(kind, synthetic cell id) of a GPU held for slices of this priority."""
    if priority < 0:
        return KIND_OPP, cell_id(OPP_PREFIX, node, gpu)
    return KIND_SHARE, cell_id(SHARE_PREFIX, node, gpu)
