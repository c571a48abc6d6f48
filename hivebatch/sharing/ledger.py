"""Fractional GPUs and opportunistic co-location, layered on the cell allocator.

The cell core knows whole GPUs only. A GPU that carries slices is held in it by a synthetic job:

* ``share:node2:3`` — GPU 3 of node2 bound to a VC as a leaf cell while any guaranteed slice of that
  VC uses it (the VC's guarantee is charged one GPU, as for any leaf cell), released with its last slice;
* ``share-opp:node2:3`` — a free GPU taken, as an opportunistic cell, by opportunistic slices; the cell
  core preempts it like any opportunistic job when a VC needs the GPU, and this ledger then names the
  slices on it for requeueing.

GPUs held whole by a guaranteed job take part only where the admin allows it: on ``allow_mixed_nodes``
slices of the job's own VC may use what the job left (it declared its per-GPU memory), and where
``colocate`` is enabled opportunistic slices may use the idle part above the guaranteed use plus a
headroom. Opportunistic slices are always the first to be preempted.

Inside the set of GPUs a slice may use, the choice is gpushare's binpack: the GPU with the least free
memory that still fits. Only when none fits is a fresh GPU cell bound, and only when the VC has no
free cell are co-located opportunistic slices preempted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from hivebatch.scheduler import Placement
from hivebatch.sharing.binpack import choose_binpack
from hivebatch.sharing.config import SharingConfig
from hivebatch.sharing.memory import format_mib, shard_rounded_mib
from hivebatch.sharing.rebuild import Rebuild
from hivebatch.sharing.slices import (
    KIND_OPP,
    KIND_SHARE,
    KIND_WHOLE,
    OPP_PREFIX,
    SHARE_PREFIX,
    Allocator,
    GpuShare,
    Slice,
    SliceDecision,
    cell_id,
    is_synthetic,
    slice_label,
)
from hivebatch.sharing.whole import WholeJobs

if TYPE_CHECKING:
    pass

# read from here by code written before the data types moved to slices.py
__all__ = [
    "KIND_OPP",
    "KIND_SHARE",
    "KIND_WHOLE",
    "OPP_PREFIX",
    "SHARE_PREFIX",
    "Allocator",
    "GpuShare",
    "SharingLedger",
    "Slice",
    "SliceDecision",
    "is_synthetic",
    "slice_label",
]


class SharingLedger(WholeJobs, Rebuild):
    """Per-GPU memory bookkeeping for slices; the cell allocator stays the owner of whole GPUs.

    Placing and releasing slices is here; whole-GPU jobs that share their GPUs are in whole.py,
    re-creating slices after a restart in rebuild.py, the tables and booking in booking.py.
    """

    # --- placing slices ----------------------------------------------------------------------------

    def place(
        self,
        job_id: str,
        vc: str,
        mem_mib: int,
        priority: int = 0,
        gpu_type: str | None = None,
        avoid: frozenset[str] = frozenset(),
    ) -> SliceDecision:
        """Place a slice of ``mem_mib`` of one GPU for ``job_id``; guaranteed if priority >= 0. ``avoid``:
        nodes the job cannot use although their GPUs are fine (its CPUs, memory, partition …)."""
        error = self._check(job_id, vc, mem_mib, gpu_type)
        if error:
            return SliceDecision(job_id, "rejected", error=error)
        need = shard_rounded_mib(mem_mib)
        if priority >= 0:
            return self._place_guaranteed(job_id, vc, need, priority, gpu_type, avoid)
        return self._place_opportunistic(job_id, vc, need, gpu_type, avoid)

    def _place_guaranteed(
        self, job_id: str, vc: str, need: int, priority: int, gpu_type: str | None, avoid: frozenset[str]
    ) -> SliceDecision:
        own = [
            g
            for g in self._gpus.values()
            if g.vc == vc
            and g.node not in avoid
            and self._typed(g, gpu_type)
            and (
                (g.kind == KIND_SHARE and g.priority >= priority)
                or (g.kind == KIND_WHOLE and self.config.mixed(g.node))
            )
        ]
        # 1. a GPU the VC already shares, without disturbing anyone
        key = choose_binpack({(g.node, g.gpu): g.free_mib for g in own}, need)
        if key is not None:
            return self._book(job_id, vc, need, priority, self._gpus[key], [])
        # 2. room on a shared GPU made by preempting opportunistic slices on it: they are the first to
        # yield, and a fresh leaf cell would split one of the VC's larger cells, which its multi-GPU
        # jobs need whole (measured: binding first made whole-GPU jobs wait longer)
        key = choose_binpack({(g.node, g.gpu): g.capacity_mib - g.guaranteed_mib for g in own}, need)
        if key is not None:
            g = self._gpus[key]
            victims = self._victims(g, need)
            for v in victims:
                self._drop_slice(v)
            return self._book(job_id, vc, need, priority, g, victims)
        # 3. a fresh leaf cell of the VC (the cell core may preempt opportunistic work for it)
        fresh, probe_reason = self._probe(vc, priority, gpu_type, need, avoid)
        if fresh is not None:
            return self._bind_and_book(job_id, vc, need, priority, fresh, KIND_SHARE, avoid)
        return SliceDecision(
            job_id,
            "waiting",
            reason=f"no GPU of VC {vc} has {format_mib(need)} free and the VC has no free GPU cell"
            + (f" ({probe_reason})" if probe_reason else ""),
        )

    def _place_opportunistic(
        self, job_id: str, vc: str, need: int, gpu_type: str | None, avoid: frozenset[str]
    ) -> SliceDecision:
        col = self.config.colocate
        free: dict[tuple[str, int], int] = {}
        for g in self._gpus.values():
            if not self._typed(g, gpu_type) or g.node in avoid:
                continue
            if g.kind == KIND_OPP:
                free[(g.node, g.gpu)] = g.free_mib
            elif col.allowed(g.vc, g.node) and len(g.opp_slices()) < col.max_jobs_per_gpu:
                free[(g.node, g.gpu)] = g.free_mib - col.headroom_mib
        key = choose_binpack(free, need, tie_break=lambda k: self._gpus[k].kind == KIND_OPP)
        if key is not None:
            return self._book(job_id, vc, need, -1, self._gpus[key], [])
        fresh, reason = self._probe(vc, -1, gpu_type, need, avoid)
        if fresh is not None:
            return self._bind_and_book(job_id, vc, need, -1, fresh, KIND_OPP, avoid)
        return SliceDecision(
            job_id,
            "waiting",
            reason=f"no GPU has {format_mib(need)} free for opportunistic work"
            + (f" ({reason})" if reason else ""),
        )

    def _probe(
        self, vc: str, priority: int, gpu_type: str | None, need: int, avoid: frozenset[str] = frozenset()
    ) -> tuple[Placement | None, str | None]:
        """Ask the cell core, without changing it, where a fresh 1-GPU cell would go."""
        last_reason: str | None = None
        for t in self._types_for(gpu_type):
            cap = self.gpu_capacity_mib(t)
            if not cap or cap < need:
                continue
            d = self.alloc.try_allocate(
                self._request(
                    job_id="share:probe",
                    vc=vc,
                    gpus=1,
                    nodes=1,
                    gpu_type=t,
                    within=None,
                    priority=priority,
                    avoid_nodes=avoid,
                )  # fmt: skip
            )
            if d.result == "placed":
                return d, None
            last_reason = d.reason or getattr(d, "error", None)
        return None, last_reason

    def _bind_and_book(
        self,
        job_id: str,
        vc: str,
        need: int,
        priority: int,
        probe: Placement,
        kind: str,
        avoid: frozenset[str],
    ) -> SliceDecision:
        ((node, gpus),) = probe.placement.items()
        gpu = gpus[0]
        prefix = SHARE_PREFIX if kind == KIND_SHARE else OPP_PREFIX
        cell = cell_id(prefix, node, gpu)
        d = self.alloc.allocate(
            self._request(
                job_id=cell,
                vc=vc,
                gpus=1,
                nodes=1,
                gpu_type=self._node_type[node],
                within=None,
                priority=priority,
                avoid_nodes=avoid,
            )
        )
        if d.result != "placed":  # the probe and the real call disagree: leave the cell core as it was
            return SliceDecision(job_id, "waiting", reason=d.reason or "the GPU cell could not be bound")
        ((real_node, real_gpus),) = d.placement.items()
        if (real_node, real_gpus[0]) != (node, gpu):
            self.alloc.release(cell)
            return SliceDecision(
                job_id, "waiting", reason="the GPU cell moved while being bound; retry next round"
            )
        preempted = self.translate_preempted(list(d.preempted))
        cap = self.node_capacity_mib(node) or 0
        g = self._share(node, gpu, cap, kind, cell, vc, priority)
        return self._book(job_id, vc, need, priority, g, preempted)

    @staticmethod
    def _victims(g: GpuShare, need: int) -> list[str]:
        """Fewest opportunistic slices whose removal frees ``need``: the largest go first."""
        free = g.free_mib
        out: list[str] = []
        for s in sorted(g.opp_slices(), key=lambda s: (-s.mem_mib, s.job_id)):
            if free >= need:
                break
            out.append(s.job_id)
            free += s.mem_mib
        return out

    # --- leaving ------------------------------------------------------------------------------------

    def release(self, job_id: str) -> list[str]:
        """A slice's job ended. Returns opportunistic jobs that must be requeued as a consequence."""
        s = self._slices.get(job_id)
        if s is None:
            raise KeyError(f"job {job_id} has no GPU slice")
        g = self._gpus[(s.node, s.gpu)]
        self._drop_slice(job_id)
        if g.kind == KIND_WHOLE:
            return []
        if g.kind == KIND_OPP:
            if not g.slices:
                self.alloc.release(g.holder)
                del self._gpus[(g.node, g.gpu)]
            return []
        # a VC's shared GPU: keep it bound while a guaranteed slice uses it
        if any(not x.opportunistic for x in g.slices.values()):
            return []
        self.alloc.release(g.holder)
        return self._rehome_opportunistic(g)

    # --- checking -------------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError when the ledger and the cell core disagree or a GPU is overbooked."""
        jobs = self.alloc.jobs()
        holders = {g.holder for g in self._gpus.values()}
        for jid in jobs:
            if is_synthetic(jid):
                assert jid in holders, f"the cell core holds {jid} but no slice uses it"
        for key, g in self._gpus.items():
            assert g.holder in jobs, f"{g.holder} holds {key} here but not in the cell core"
            assert {n: list(ix) for n, ix in jobs[g.holder].placement.items()}.get(g.node) is not None
            assert g.gpu in jobs[g.holder].placement[g.node], f"{g.holder} is not on {key} in the cell core"
            assert g.free_mib >= 0, f"{key} is overbooked by {-g.free_mib} MiB"
            if g.kind in (KIND_SHARE, KIND_OPP):
                assert g.slices, f"{g.holder} stays bound with no slice on it"
            if g.kind == KIND_OPP:
                assert all(s.opportunistic for s in g.slices.values()), f"guaranteed slice on {g.holder}"
            for jid, s in g.slices.items():
                assert self._slices.get(jid) is s, f"slice {jid} is booked twice or lost"
                if not s.opportunistic:  # guaranteed slices stay inside their own VC's cells
                    assert s.vc == g.vc == jobs[g.holder].vc, f"slice {jid} of {s.vc} on a GPU of {g.vc}"
        assert sum(len(g.slices) for g in self._gpus.values()) == len(self._slices)

    # --- persistence ----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "gpus": [
                {
                    **{k: v for k, v in asdict(g).items() if k != "slices"},
                    "slices": [asdict(s) for s in g.slices.values()],
                }
                for g in self._gpus.values()
            ],
            "whole": self._whole,
        }

    @classmethod
    def restore(
        cls,
        alloc: Allocator,
        spec: Any,
        config: SharingConfig | None,
        snap: Mapping[str, Any],
        request_factory: Callable[..., Any] | None = None,
    ) -> SharingLedger:
        """Rebuild from :meth:`snapshot`; the allocator must be restored from its own snapshot."""
        led = cls(alloc, spec, config, request_factory)
        for raw in snap.get("gpus", []):
            slices = [Slice(**s) for s in raw["slices"]]
            g = GpuShare(**{k: v for k, v in raw.items() if k != "slices"})
            g.slices = {s.job_id: s for s in slices}
            led._gpus[(g.node, g.gpu)] = g
            led._slices.update(g.slices)
        led._whole = {k: dict(v) for k, v in snap.get("whole", {}).items()}
        return led
