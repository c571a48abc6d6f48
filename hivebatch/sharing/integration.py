"""Helpers for the parts of hivebatch that use GPU sharing: hsub's checks, the controller's rebuild
of the ledger each cycle, and how hq / hadmin show a slice. Pure, like the rest of the package."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hivebatch.errors import HivebatchError
from hivebatch.sharing.config import SharingConfig, parse_sharing_config
from hivebatch.sharing.env import job_environment
from hivebatch.sharing.gres import parse_shard_gres
from hivebatch.sharing.ledger import SharingLedger
from hivebatch.sharing.memory import SHARD_MIB, format_mib, shard_rounded_mib, usable_mib
from hivebatch.sharing.slices import KIND_OPP, KIND_WHOLE, GpuShare, is_synthetic, slice_label


def load_sharing(data: Mapping[str, Any], spec: Any) -> SharingConfig:
    """The ``sharing:`` section checked against the cluster's nodes and VCs."""
    return parse_sharing_config(data, {n.name for n in spec.nodes}, set(spec.vcs))


def gpu_capacity_mib(spec: Any, gpu_type: str | None) -> int | None:
    """Usable memory of one GPU of ``gpu_type`` (None: the smallest of the cluster's types)."""
    types = [gpu_type] if gpu_type else list(spec.gpu_types)
    caps = [usable_mib(int(m)) for t in types if (m := spec.gpu_memory_mib(t))]
    return min(caps) if caps else None


def is_slice(spec: Any, gpus: int, gpu_mem_mib: int | None, gpu_type: str | None = None) -> bool:
    """A request is a slice of one GPU when it asks one GPU and less memory than the GPU has."""
    if gpu_mem_mib is None or gpus != 1:
        return False
    cap = gpu_capacity_mib(spec, gpu_type)
    return cap is not None and shard_rounded_mib(gpu_mem_mib) < cap


def check_submission(
    data: Mapping[str, Any], spec: Any, gpus: int, gpu_mem_mib: int | None, gpu_type: str | None
) -> tuple[dict[str, str], list[str]]:
    """hsub's check of ``--gpu-mem``: the environment to give the job and notes for the user, or one
    HivebatchError line saying what to change."""
    if gpu_mem_mib is None:
        return {}, []
    cfg = load_sharing(data, spec)
    cap = gpu_capacity_mib(spec, gpu_type)
    what = gpu_type or "/".join(spec.gpu_types)
    if cap is None:
        raise HivebatchError(
            f"--gpu-mem needs the GPU memory of {what} in the config (memory: on the leaf cell type); ask the admin"
        )
    asked = shard_rounded_mib(gpu_mem_mib)
    if asked > cap:
        raise HivebatchError(
            f"--gpu-mem {format_mib(gpu_mem_mib)} is more than one {what} GPU has ({format_mib(cap)}): "
            "ask for less, or drop --gpu-mem to get whole GPUs"
        )
    if gpus != 1 or asked >= cap:
        note = f"declared {format_mib(asked)} per GPU; the job gets {gpus} whole GPU(s)"
        if asked < cap and (cfg.allow_mixed_nodes or cfg.colocate.enabled):
            note += (
                f"; with one GPU per node, on nodes that allow sharing it holds {format_mib(asked)} of each"
                " and other jobs' slices may use the rest: keep within it"
            )
        return {}, [note]
    if not cfg.enabled:
        raise HivebatchError("GPU sharing is switched off on this cluster: drop --gpu-mem to get a whole GPU")
    env = job_environment(asked, cap)
    note = (
        f"shares one {what} GPU: {format_mib(asked)} of its {format_mib(cap)} ({100 * asked / cap:.0f}%), "
        "binpacked with other slices; keep your framework within it (HIVEBATCH_GPU_MEM_MIB and "
        "HIVEBATCH_GPU_MEM_FRACTION are set)"
    )
    return env, [note]


#: the cell core's priority of opportunistic work (the ledger books such slices with it)
_OPPORTUNISTIC = -1


@dataclass(frozen=True)
class HeldSlice:
    """A slice some job holds now (granted or running), as the controller's ledger knows it."""

    job_id: str
    vc: str
    priority: int
    node: str
    gpu: int
    mem_mib: int


@dataclass(frozen=True)
class HeldWhole:
    """A guaranteed whole-GPU job that holds its GPUs as shards (it declared its memory per GPU on
    nodes where sharing is allowed); the cell allocator already holds its GPUs."""

    job_id: str
    vc: str
    priority: int
    placement: dict[str, list[int]]
    declared_mib: int


def rebuild_ledger(
    alloc: Any,
    spec: Any,
    data: Mapping[str, Any],
    held: Iterable[HeldSlice],
    wholes: Iterable[HeldWhole] = (),
    downgrade: bool = False,
) -> tuple[SharingLedger, list[tuple[HeldSlice, str]]]:
    """A ledger over ``alloc`` holding exactly ``held`` (guaranteed slices first) on top of the whole-GPU
    jobs in ``wholes`` (noted first: slices may sit on the part of their GPUs they leave). The allocator
    must not hold the slices' jobs themselves, nor stale synthetic cells (they are released here).
    Returns the ledger and the slices that could not be booked, with the reason (count their GPUs as
    foreign). ``downgrade``: a guaranteed slice its VC's cells cannot hold (the config changed while it
    ran) is booked as opportunistic work where its GPU has room for that (``downgraded``)."""
    for jid in [j for j in alloc.jobs() if is_synthetic(j)]:
        alloc.release(jid)
    led = SharingLedger(alloc, spec, load_sharing(data, spec))
    for w in wholes:
        led.note_whole_job(w.job_id, w.vc, w.priority, w.placement, w.declared_mib)
    failed: list[tuple[HeldSlice, str]] = []
    for h in sorted(held, key=lambda h: (h.priority < 0, h.node, h.gpu, h.job_id)):
        d = led.adopt_slice(h.job_id, h.vc, h.priority, h.node, h.gpu, h.mem_mib)
        if d.result == "placed":
            continue
        if downgrade and h.priority >= 0:
            again = led.adopt_slice(h.job_id, h.vc, _OPPORTUNISTIC, h.node, h.gpu, h.mem_mib)
            if again.result == "placed":
                continue
        failed.append((h, d.error or d.reason or "its GPU is busy"))
    return led, failed


def downgraded(led: SharingLedger, held: Iterable[HeldSlice]) -> list[HeldSlice]:
    """The guaranteed slices of ``held`` that ``led`` books as opportunistic work (``rebuild_ledger``'s
    ``downgrade``)."""
    booked = led.slices()
    return [h for h in held if h.priority >= 0 and h.job_id in booked and booked[h.job_id].priority < 0]


def slice_share(mem_mib: int, capacity_mib: int) -> float:
    """The part of a GPU a slice counts for in GPU-hours."""
    return min(1.0, shard_rounded_mib(mem_mib) / capacity_mib) if capacity_mib else 1.0


def slice_text(placement: Mapping[str, Iterable[int]], mem_mib: int, capacity_mib: int) -> str:
    """``node2:[3] 8G/32G`` for a slice's placement."""
    if not placement:
        return "-"
    (node, gpus), *_ = placement.items()
    return slice_label(node, sorted(gpus)[0], shard_rounded_mib(mem_mib), capacity_mib)


def describe_gpu(g: GpuShare) -> str:
    """One shared GPU for a cluster map: who holds it, memory booked, slices on it."""
    who = "opportunistic" if g.kind == KIND_OPP else (g.vc or "?")
    used = g.guaranteed_mib + g.opportunistic_mib
    extra = f"+{len(g.opp_slices())} opp" if g.opp_slices() and g.kind != KIND_OPP else ""
    base = "whole+" if g.kind == KIND_WHOLE else ""
    n = len(g.slices)
    return f"{base}shared {who} {format_mib(used)}/{format_mib(g.capacity_mib)} {n} job{'s' if n != 1 else ''}{extra and ' ' + extra}"


def _holds_gpus(job: Any) -> bool:
    """Whether a controller ledger row holds its placement now (the controller's own rule)."""
    return bool(job.placement) and (
        job.intent == "place" or (job.state in ("placed", "running") and job.intent != "preempt")
    )


def is_slice_row(job: Any) -> bool:
    """Whether a controller ledger row is a GPU slice, by its request: one GPU granted as shards. A
    whole-GPU job of several nodes may hold its GPU on each node as shards too (``note_whole_job``);
    it asked for more than one GPU."""
    if getattr(job, "foreign", False) or not str(getattr(job, "gres", None) or "").startswith("shard:"):
        return False
    req = getattr(job, "request", None)
    gpus = req.get("gpus", 1) if isinstance(req, Mapping) else getattr(job, "gpus", 1)
    return int(gpus if gpus is not None else 1) == 1


def held_wholes(jobs: Iterable[Any]) -> list[HeldWhole]:
    """The guaranteed whole-GPU jobs among controller ledger rows that hold their GPUs as shards."""
    out: list[HeldWhole] = []
    for j in jobs:
        gres = str(getattr(j, "gres", None) or "")
        if getattr(j, "foreign", False) or not gres.startswith("shard:") or is_slice_row(j):
            continue
        req = getattr(j, "request", None) or {}
        mem = req.get("gpu_mem_mib") if isinstance(req, Mapping) else None
        if not mem or int(j.priority or 0) < 0 or not _holds_gpus(j):
            continue
        placement = {n: sorted(int(i) for i in g) for n, g in j.placement.items()}
        out.append(HeldWhole(str(j.slurm_job_id), j.vc_name or "", int(j.priority or 0), placement, int(mem)))
    return out


def held_slices(jobs: Iterable[Any]) -> list[HeldSlice]:
    """The slices controller ledger rows hold: hsub jobs granted a ``shard:gN:k`` gres on one node."""
    out: list[HeldSlice] = []
    for j in jobs:
        gres = str(getattr(j, "gres", None) or "")
        if not is_slice_row(j) or not _holds_gpus(j):
            continue
        shards = parse_shard_gres(gres)
        if len(j.placement) != 1 or len(shards) != 1:
            continue
        ((node, _gpus),) = j.placement.items()
        ((gpu, count),) = shards.items()
        out.append(
            HeldSlice(
                str(j.slurm_job_id), j.vc_name or "", int(j.priority or 0), node, gpu, count * SHARD_MIB
            )
        )
    return out


def controller_ledger(
    alloc: Any,
    spec: Any,
    data: Mapping[str, Any],
    jobs: Iterable[Any],
    wholes: Iterable[Any] = (),
) -> tuple[SharingLedger, list[tuple[HeldSlice, str]]]:
    """The sharing ledger for one controller cycle, over the allocator it has just rebuilt (which holds
    no slice jobs; it holds the GPUs of the whole-GPU rows in ``wholes``). Slices that cannot be booked
    keep their GPU as foreign work, so it is never handed out twice."""
    led, failed = rebuild_ledger(alloc, spec, data, held_slices(jobs), held_wholes(wholes), downgrade=True)
    for h, _why in failed:
        try:
            alloc.occupy_foreign(f"slice:{h.job_id}@{h.node}", h.node, [h.gpu])
        except Exception:  # noqa: BLE001 - the GPU is already held: it cannot be given out anyway
            continue
    return led, failed


def add_gpu_capacity(rows: Iterable[Any], data: Mapping[str, Any] | None) -> None:
    """Set ``gpu_total_mib`` on rows that carry a slice (``gpu_mem_mib``), from the config's GPU memory."""
    if not data:
        return
    try:
        from hivebatch.cells import parse_cluster_config

        spec = parse_cluster_config(dict(data))
    except Exception:  # noqa: BLE001 - a display nicety: without a readable config the size stays bare
        return
    for row in rows:
        if getattr(row, "gpu_mem_mib", None):
            gpu_type = getattr(row, "gpu_type", None)
            row.gpu_total_mib = gpu_capacity_mib(spec, gpu_type if gpu_type in spec.gpu_types else None)
