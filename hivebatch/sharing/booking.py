"""The sharing ledger's tables and the bookkeeping every part of it uses: capacity, booking a slice on a
GPU, dropping it, and keeping a GPU's opportunistic slices when its guaranteed holder leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hivebatch.sharing.config import SharingConfig
from hivebatch.sharing.memory import format_mib, shard_rounded_mib, usable_mib
from hivebatch.sharing.slices import (
    KIND_OPP,
    OPP_PREFIX,
    Allocator,
    GpuShare,
    Slice,
    SliceDecision,
    cell_id,
    slice_label,
)

if TYPE_CHECKING:
    from hivebatch.cells.spec import ClusterSpec


def _default_request(**kw: Any) -> Any:
    from hivebatch.cells import Request  # imported late: the ledger must not need the core to load

    return Request(**kw)


class LedgerBase:
    """Per-GPU memory bookkeeping for slices; the cell allocator stays the owner of whole GPUs."""

    def __init__(
        self,
        alloc: Allocator,
        spec: ClusterSpec,
        config: SharingConfig | None = None,
        request_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.alloc = alloc
        self.spec = spec
        self.config = config or SharingConfig()
        self._request = request_factory or _default_request
        self._gpus: dict[tuple[str, int], GpuShare] = {}
        self._slices: dict[str, Slice] = {}
        self._whole: dict[str, dict[str, Any]] = {}  # whole jobs we book: vc, priority, placement, reserve
        self._node_type: dict[str, str] = {n.name: n.gpu_type for n in spec.nodes}
        self._node_gpus: dict[str, list[int]] = {n.name: list(n.gpu_indices) for n in spec.nodes}

    # --- capacity --------------------------------------------------------------------------------

    def gpu_capacity_mib(self, gpu_type: str) -> int | None:
        mem = self.spec.gpu_memory_mib(gpu_type)
        return None if mem is None else usable_mib(int(mem))

    def node_capacity_mib(self, node: str) -> int | None:
        t = self._node_type.get(node)
        return None if t is None else self.gpu_capacity_mib(t)

    def _types_for(self, gpu_type: str | None) -> list[str]:
        return [gpu_type] if gpu_type else list(self.spec.gpu_types)

    # --- queries -----------------------------------------------------------------------------------

    def slices(self) -> dict[str, Slice]:
        return dict(self._slices)

    def slice_of(self, job_id: str) -> Slice | None:
        return self._slices.get(job_id)

    def gpus(self) -> dict[tuple[str, int], GpuShare]:
        return dict(self._gpus)

    def describe(self, job_id: str) -> str | None:
        s = self._slices.get(job_id)
        if s is None:
            return None
        return slice_label(s.node, s.gpu, s.mem_mib, self._gpus[(s.node, s.gpu)].capacity_mib)

    def is_fractional(self, gpus: int, gpu_mem_mib: int | None, gpu_type: str | None = None) -> bool:
        """A request is a slice when it asks one GPU and less memory than a whole GPU of its type."""
        if gpu_mem_mib is None or gpus != 1:
            return False
        caps = [c for t in self._types_for(gpu_type) if (c := self.gpu_capacity_mib(t))]
        return bool(caps) and shard_rounded_mib(gpu_mem_mib) < max(caps)

    # --- checks ------------------------------------------------------------------------------------

    def _check(self, job_id: str, vc: str, mem_mib: int, gpu_type: str | None) -> str | None:
        """Why a slice request can never be placed, or None."""
        if not self.config.enabled:
            return "GPU sharing is switched off on this cluster (sharing: enabled: false); ask for whole GPUs"
        if job_id in self._slices:
            return f"job {job_id} already has a GPU slice"
        if vc not in self.spec.vcs:
            return f"unknown virtual cluster {vc!r}"
        types = self._types_for(gpu_type)
        if gpu_type and gpu_type not in self.spec.gpu_types:
            return f"unknown GPU type {gpu_type!r} (known: {', '.join(self.spec.gpu_types)})"
        caps = {t: self.gpu_capacity_mib(t) for t in types}
        if not any(caps.values()):
            return f"GPU memory of {'/'.join(types)} is not configured (add memory: to the leaf cell type)"
        biggest = max(c for c in caps.values() if c)
        if shard_rounded_mib(mem_mib) > biggest:
            return (
                f"{format_mib(mem_mib)} is more than one GPU has ({format_mib(biggest)}); ask for whole GPUs"
            )
        return None

    def _typed(self, g: GpuShare, gpu_type: str | None) -> bool:
        return gpu_type is None or self._node_type.get(g.node) == gpu_type

    # --- booking -----------------------------------------------------------------------------------

    def _share(
        self, node: str, gpu: int, cap: int, kind: str, holder: str, vc: str, priority: int
    ) -> GpuShare:
        """Start booking slices on a GPU the cell core now holds for ``holder``."""
        g = GpuShare(node=node, gpu=gpu, capacity_mib=cap, kind=kind, holder=holder, vc=vc, priority=priority)
        self._gpus[(node, gpu)] = g
        return g

    def _book(
        self, job_id: str, vc: str, need: int, priority: int, g: GpuShare, preempted: list[str]
    ) -> SliceDecision:
        s = Slice(job_id=job_id, vc=vc, node=g.node, gpu=g.gpu, mem_mib=need, priority=priority)
        g.slices[job_id] = s
        self._slices[job_id] = s
        colocated = s.opportunistic and g.kind != KIND_OPP
        return SliceDecision(
            job_id,
            "placed",
            node=g.node,
            gpu=g.gpu,
            mem_mib=need,
            capacity_mib=g.capacity_mib,
            preempted=preempted,
            colocated=colocated,
        )

    def _drop_slice(self, job_id: str) -> None:
        s = self._slices.pop(job_id)
        self._gpus[(s.node, s.gpu)].slices.pop(job_id, None)

    def _rehome_opportunistic(self, g: GpuShare) -> list[str]:
        """The GPU's guaranteed holder left: its opportunistic slices keep it as an opportunistic cell
        when the cell core still has it free, else they are requeued."""
        key = (g.node, g.gpu)
        opp = g.opp_slices()
        if not opp:
            self._gpus.pop(key, None)
            return []
        cell = cell_id(OPP_PREFIX, g.node, g.gpu)
        d = self.alloc.adopt(cell, opp[0].vc, -1, {g.node: [g.gpu]})
        if d.result == "placed":
            share = self._share(g.node, g.gpu, g.capacity_mib, KIND_OPP, cell, opp[0].vc, -1)
            share.slices = {s.job_id: s for s in opp}
            return []
        for s in opp:
            self._slices.pop(s.job_id, None)
        self._gpus.pop(key, None)
        return [s.job_id for s in opp]
