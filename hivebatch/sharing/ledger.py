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
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from hivebatch.sharing.binpack import choose_binpack
from hivebatch.sharing.config import SharingConfig
from hivebatch.sharing.memory import SHARD_MIB, format_mib, shard_rounded_mib, usable_mib

SHARE_PREFIX = "share:"
OPP_PREFIX = "share-opp:"
KIND_SHARE = "share"  # bound to a VC for guaranteed slices
KIND_OPP = "opp"  # opportunistic cell holding opportunistic slices
KIND_WHOLE = "whole"  # held by a guaranteed whole-GPU job that lets others use what it leaves


class _Decision(Protocol):
    result: str
    placement: dict[str, list[int]]
    preempted: list[str]
    reason: str | None


class Allocator(Protocol):
    """What the ledger needs of hivebatch.cells.CellAllocator."""

    def allocate(self, req: Any) -> Any: ...
    def try_allocate(self, req: Any) -> Any: ...
    def release(self, job_id: str) -> Any: ...
    def adopt(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> Any: ...


def is_synthetic(job_id: str) -> bool:
    return job_id.startswith(SHARE_PREFIX) or job_id.startswith(OPP_PREFIX)


def _cell_id(prefix: str, node: str, gpu: int) -> str:
    return f"{prefix}{node}:{gpu}"


def _default_request(**kw: Any) -> Any:
    from hivebatch.cells import Request  # imported late: the ledger must not need the core to load

    return Request(**kw)


@dataclass
class Slice:
    job_id: str
    vc: str
    node: str
    gpu: int
    mem_mib: int  # reserved, in whole shards
    priority: int

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0

    @property
    def shards(self) -> int:
        return self.mem_mib // SHARD_MIB

    @property
    def gres(self) -> str:
        return f"shard:g{self.gpu}:{self.shards}"


@dataclass
class GpuShare:
    """One GPU that carries slices or may carry them."""

    node: str
    gpu: int
    capacity_mib: int
    kind: str
    holder: str  # synthetic cell id, or the whole job's id
    vc: str | None
    priority: int  # the holder's priority in the cell core
    reserve_mib: int = 0  # memory a whole-GPU holder keeps
    slices: dict[str, Slice] = field(default_factory=dict)

    @property
    def guaranteed_mib(self) -> int:
        return self.reserve_mib + sum(s.mem_mib for s in self.slices.values() if not s.opportunistic)

    @property
    def opportunistic_mib(self) -> int:
        return sum(s.mem_mib for s in self.slices.values() if s.opportunistic)

    @property
    def free_mib(self) -> int:
        return self.capacity_mib - self.guaranteed_mib - self.opportunistic_mib

    def opp_slices(self) -> list[Slice]:
        return [s for s in self.slices.values() if s.opportunistic]


@dataclass
class SliceDecision:
    job_id: str
    result: str  # placed | waiting | rejected
    node: str | None = None
    gpu: int | None = None
    mem_mib: int = 0
    capacity_mib: int = 0
    preempted: list[str] = field(default_factory=list)
    colocated: bool = False  # on a GPU whose guaranteed holder leaves it idle in part
    reason: str | None = None
    error: str | None = None

    @property
    def shards(self) -> int:
        return self.mem_mib // SHARD_MIB

    @property
    def gres(self) -> str | None:
        return None if self.gpu is None else f"shard:g{self.gpu}:{self.shards}"

    @property
    def placement(self) -> dict[str, list[int]]:
        return {} if self.node is None or self.gpu is None else {self.node: [self.gpu]}

    def describe(self) -> str:
        if self.node is None or self.gpu is None:
            return "-"
        return slice_label(self.node, self.gpu, self.mem_mib, self.capacity_mib)


def slice_label(node: str, gpu: int, mem_mib: int, capacity_mib: int) -> str:
    """How hq shows a slice: ``node2:[3] 8G/32G``."""
    return f"{node}:[{gpu}] {format_mib(mem_mib)}/{format_mib(capacity_mib)}"


class SharingLedger:
    """Per-GPU memory bookkeeping for slices; the cell allocator stays the owner of whole GPUs."""

    #: a guaranteed slice reclaims memory from co-located opportunistic slices before binding a fresh cell
    reclaim_first: bool = True

    def __init__(
        self,
        alloc: Allocator,
        spec: Any,
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

    # --- placing slices ----------------------------------------------------------------------------

    def place(
        self, job_id: str, vc: str, mem_mib: int, priority: int = 0, gpu_type: str | None = None
    ) -> SliceDecision:
        """Place a slice of ``mem_mib`` of one GPU for ``job_id``; guaranteed if priority >= 0."""
        error = self._check(job_id, vc, mem_mib, gpu_type)
        if error:
            return SliceDecision(job_id, "rejected", error=error)
        need = shard_rounded_mib(mem_mib)
        if priority >= 0:
            return self._place_guaranteed(job_id, vc, need, priority, gpu_type)
        return self._place_opportunistic(job_id, vc, need, gpu_type)

    def _check(self, job_id: str, vc: str, mem_mib: int, gpu_type: str | None) -> str | None:
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

    def _place_guaranteed(
        self, job_id: str, vc: str, need: int, priority: int, gpu_type: str | None
    ) -> SliceDecision:
        own = [
            g
            for g in self._gpus.values()
            if g.vc == vc
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
        fresh, probe_reason = (
            (None, None) if self.reclaim_first else self._probe(vc, priority, gpu_type, need)
        )
        if fresh is None or fresh.preempted:
            key = choose_binpack({(g.node, g.gpu): g.capacity_mib - g.guaranteed_mib for g in own}, need)
            if key is not None:
                g = self._gpus[key]
                victims = self._victims(g, need)
                for v in victims:
                    self._drop_slice(v)
                return self._book(job_id, vc, need, priority, g, victims)
        # 3. a fresh leaf cell of the VC (the cell core may preempt opportunistic work for it)
        if self.reclaim_first:
            fresh, probe_reason = self._probe(vc, priority, gpu_type, need)
        if fresh is not None:
            return self._bind_and_book(job_id, vc, need, priority, fresh, KIND_SHARE)
        return SliceDecision(
            job_id,
            "waiting",
            reason=f"no GPU of VC {vc} has {format_mib(need)} free and the VC has no free GPU cell"
            + (f" ({probe_reason})" if probe_reason else ""),
        )

    def _place_opportunistic(self, job_id: str, vc: str, need: int, gpu_type: str | None) -> SliceDecision:
        col = self.config.colocate
        free: dict[tuple[str, int], int] = {}
        for g in self._gpus.values():
            if not self._typed(g, gpu_type):
                continue
            if g.kind == KIND_OPP:
                free[(g.node, g.gpu)] = g.free_mib
            elif col.allowed(g.vc, g.node) and len(g.opp_slices()) < col.max_jobs_per_gpu:
                free[(g.node, g.gpu)] = g.free_mib - col.headroom_mib
        key = choose_binpack(free, need, tie_break=lambda k: self._gpus[k].kind == KIND_OPP)
        if key is not None:
            return self._book(job_id, vc, need, -1, self._gpus[key], [])
        fresh, reason = self._probe(vc, -1, gpu_type, need)
        if fresh is not None:
            return self._bind_and_book(job_id, vc, need, -1, fresh, KIND_OPP)
        return SliceDecision(
            job_id,
            "waiting",
            reason=f"no GPU has {format_mib(need)} free for opportunistic work"
            + (f" ({reason})" if reason else ""),
        )

    def _probe(
        self, vc: str, priority: int, gpu_type: str | None, need: int
    ) -> tuple[Any | None, str | None]:
        """Ask the cell core, without changing it, where a fresh 1-GPU cell would go."""
        last_reason: str | None = None
        for t in self._types_for(gpu_type):
            cap = self.gpu_capacity_mib(t)
            if not cap or cap < need:
                continue
            d = self.alloc.try_allocate(
                self._request(
                    job_id="share:probe", vc=vc, gpus=1, nodes=1, gpu_type=t, within=None, priority=priority
                )
            )
            if d.result == "placed":
                return d, None
            last_reason = d.reason or getattr(d, "error", None)
        return None, last_reason

    def _bind_and_book(
        self, job_id: str, vc: str, need: int, priority: int, probe: Any, kind: str
    ) -> SliceDecision:
        ((node, gpus),) = probe.placement.items()
        gpu = gpus[0]
        prefix = SHARE_PREFIX if kind == KIND_SHARE else OPP_PREFIX
        cell = _cell_id(prefix, node, gpu)
        d = self.alloc.allocate(
            self._request(
                job_id=cell,
                vc=vc,
                gpus=1,
                nodes=1,
                gpu_type=self._node_type[node],
                within=None,
                priority=priority,
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
        g = GpuShare(node=node, gpu=gpu, capacity_mib=cap, kind=kind, holder=cell, vc=vc, priority=priority)
        self._gpus[(node, gpu)] = g
        return self._book(job_id, vc, need, priority, g, preempted)

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
        cell = _cell_id(OPP_PREFIX, g.node, g.gpu)
        d = self.alloc.adopt(cell, opp[0].vc, -1, {g.node: [g.gpu]})
        if d.result == "placed":
            self._gpus[key] = GpuShare(
                node=g.node,
                gpu=g.gpu,
                capacity_mib=g.capacity_mib,
                kind=KIND_OPP,
                holder=cell,
                vc=opp[0].vc,
                priority=-1,
                slices={s.job_id: s for s in opp},
            )
            return []
        for s in opp:
            self._slices.pop(s.job_id, None)
        self._gpus.pop(key, None)
        return [s.job_id for s in opp]

    # --- whole-GPU jobs that leave part of their GPUs -------------------------------------------------

    def _shareable(self, vc: str, node: str) -> bool:
        return self.config.mixed(node) or self.config.colocate.allowed(vc, node)

    def whole_job_reserve_mib(
        self, vc: str, placement: Mapping[str, list[int]], declared_mib: int | None
    ) -> int | None:
        """Memory per GPU a guaranteed whole-GPU job keeps when the rest may be shared, else None
        (then it takes its GPUs whole and Slurm gets ``gpu:gN:1``)."""
        if not self.config.enabled or declared_mib is None or not placement:
            return None
        if not all(self._shareable(vc, n) for n in placement):
            return None
        # Slurm 22.05 grants a job shards of one GPU per node only (``shard:g2:20,shard:g5:20`` runs on
        # GPU 2 alone), so only jobs with one GPU per node can hold their GPU as shards.
        if any(len(gpus) != 1 for gpus in placement.values()):
            return None
        caps = {self.node_capacity_mib(n) for n in placement}
        if None in caps or len(caps) != 1:
            return None
        cap = caps.pop() or 0
        reserve = shard_rounded_mib(declared_mib)
        return reserve if reserve < cap else None

    def whole_job_gres(self, vc: str, placement: Mapping[str, list[int]], declared_mib: int | None) -> str:
        """The per-node gres for a whole-GPU job: its shards where it shares its GPUs, else whole GPUs."""
        gpus = sorted(next(iter(placement.values()))) if placement else []
        reserve = self.whole_job_reserve_mib(vc, placement, declared_mib)
        if reserve is None:
            return ",".join(f"gpu:g{i}:1" for i in gpus)
        return ",".join(f"shard:g{i}:{reserve // SHARD_MIB}" for i in gpus)

    def note_whole_job(
        self,
        job_id: str,
        vc: str,
        priority: int,
        placement: Mapping[str, list[int]],
        declared_mib: int | None,
    ) -> bool:
        """Record a placed guaranteed whole-GPU job; True when its GPUs are open to slices."""
        reserve = self.whole_job_reserve_mib(vc, placement, declared_mib)
        if reserve is None or priority < 0:
            return False
        self._whole[job_id] = {
            "vc": vc,
            "priority": priority,
            "placement": {n: list(g) for n, g in placement.items()},
            "reserve": reserve,
        }
        for node, gpus in placement.items():
            cap = self.node_capacity_mib(node) or 0
            for gpu in gpus:
                self._gpus[(node, gpu)] = GpuShare(
                    node=node,
                    gpu=gpu,
                    capacity_mib=cap,
                    kind=KIND_WHOLE,
                    holder=job_id,
                    vc=vc,
                    priority=priority,
                    reserve_mib=reserve,
                )
        return True

    def release_whole_job(self, job_id: str) -> list[str]:
        """A noted whole-GPU job left (after the cell core released it). Its GPUs' slices stay where the
        cell core still has the GPU free — guaranteed slices as a share cell of their VC, opportunistic
        ones as an opportunistic cell — else they are returned for requeueing."""
        info = self._whole.pop(job_id, None)
        if info is None:
            return []
        out: list[str] = []
        for node, gpus in info["placement"].items():
            for gpu in gpus:
                g = self._gpus.get((node, gpu))
                if g is None or g.holder != job_id:
                    continue
                g.reserve_mib = 0
                guaranteed = [s for s in g.slices.values() if not s.opportunistic]
                if guaranteed:
                    cell = _cell_id(SHARE_PREFIX, node, gpu)
                    prio = min(s.priority for s in guaranteed)
                    d = self.alloc.adopt(cell, info["vc"], prio, {node: [gpu]})
                    if d.result == "placed":
                        g.kind, g.holder, g.priority = KIND_SHARE, cell, prio
                        if not self.config.colocate.allowed(g.vc, node):
                            for s in g.opp_slices():
                                self._drop_slice(s.job_id)
                                out.append(s.job_id)
                        continue
                    for s in list(g.slices.values()):
                        self._drop_slice(s.job_id)
                        out.append(s.job_id)
                    del self._gpus[(node, gpu)]
                    continue
                out += self._rehome_opportunistic(g)
        return out

    def translate_preempted(self, job_ids: list[str]) -> list[str]:
        """Turn the cell core's ``preempted`` list into the real jobs to requeue: a synthetic share cell
        stands for the slices on its GPU; a noted whole job takes its co-located slices with it."""
        out: list[str] = []
        for jid in job_ids:
            if is_synthetic(jid):
                key = next((k for k, g in self._gpus.items() if g.holder == jid), None)
                if key is None:
                    continue
                g = self._gpus.pop(key)
                for s in g.slices.values():
                    self._slices.pop(s.job_id, None)
                    out.append(s.job_id)
            else:
                out.append(jid)
                if jid in self._whole:
                    out += self.release_whole_job(jid)
        seen: set[str] = set()
        return [j for j in out if not (j in seen or seen.add(j))]  # type: ignore[func-returns-value]

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
            kind = KIND_OPP if priority < 0 else KIND_SHARE
            cell = _cell_id(OPP_PREFIX if priority < 0 else SHARE_PREFIX, node, gpu)
            d = self.alloc.adopt(cell, vc, priority, {node: [gpu]})
            if d.result != "placed":
                return SliceDecision(
                    job_id, "rejected", error=d.reason or getattr(d, "error", None) or "GPU busy"
                )
            g = GpuShare(
                node=node, gpu=gpu, capacity_mib=cap, kind=kind, holder=cell, vc=vc, priority=priority
            )
            self._gpus[(node, gpu)] = g
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
    ) -> SliceDecision:
        """Place a requeued slice again on GPU ``gpu_index`` of some node: Slurm keeps its typed gres
        (``shard:g3:k``) and cannot re-type it safely, so only the node may change."""
        error = self._check(job_id, vc, mem_mib, None)
        if error:
            return SliceDecision(job_id, "rejected", error=error)
        need = shard_rounded_mib(mem_mib)
        order = list(nodes_first or []) + sorted(n for n in self._node_gpus if n not in (nodes_first or []))
        rank = {n: i for i, n in enumerate(order)}
        col = self.config.colocate
        free: dict[tuple[str, int], int] = {}
        for g in self._gpus.values():
            if g.gpu != gpu_index:
                continue
            own = priority >= 0 and g.vc == vc and g.kind == KIND_SHARE and g.priority >= priority
            if own or (priority < 0 and g.kind == KIND_OPP):
                free[(g.node, g.gpu)] = g.free_mib
            elif priority < 0 and col.allowed(g.vc, g.node) and len(g.opp_slices()) < col.max_jobs_per_gpu:
                free[(g.node, g.gpu)] = g.free_mib - col.headroom_mib
        key = choose_binpack(free, need, tie_break=lambda k: rank.get(k[0], len(rank)))
        if key is not None:
            return self._book(job_id, vc, need, priority, self._gpus[key], [])
        for node in order:
            if gpu_index not in self._node_gpus.get(node, []) or (node, gpu_index) in self._gpus:
                continue
            cap = self.node_capacity_mib(node)
            if not cap or cap < need:
                continue
            kind = KIND_OPP if priority < 0 else KIND_SHARE
            cell = _cell_id(OPP_PREFIX if priority < 0 else SHARE_PREFIX, node, gpu_index)
            gmap = self.alloc.gpu_map().get(node, {})  # type: ignore[attr-defined]
            use = gmap.get(gpu_index)
            if use is None or use.job is not None or use.bad or use.foreign:
                continue
            d = self.alloc.adopt(cell, vc, priority, {node: [gpu_index]})
            if d.result != "placed":
                continue
            g = GpuShare(
                node=node, gpu=gpu_index, capacity_mib=cap, kind=kind, holder=cell, vc=vc, priority=priority
            )
            self._gpus[(node, gpu_index)] = g
            return self._book(job_id, vc, need, priority, g, [])
        return SliceDecision(
            job_id,
            "waiting",
            reason=f"requeued on GPU index {gpu_index}; waits until GPU {gpu_index} of some node has "
            f"{format_mib(need)} free" + (f" in VC {vc}'s cells" if priority >= 0 else ""),
        )

    # --- checking -------------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError when the ledger and the cell core disagree or a GPU is overbooked."""
        jobs = self.alloc.jobs()  # type: ignore[attr-defined]
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
