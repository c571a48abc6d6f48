"""Step 3: choose what to start, where, and what to preempt — with the shared ``schedule_round``.

The queue is every held hsub job of the ledger that waits (queued, preempted or rejected last
time). Jobs are checked against the config first (VC, Slurm account, class) so a bad request gets
a reason instead of waiting silently; the rest become QoS tasks and go through
``hivebatch.scheduler.schedule_round`` (QoS policy order and shapes, cell allocator placement) —
the same function the simulator uses.

Requeued jobs already carry a typed GPU gres (``gpu:g3:1,…``) and Slurm cannot re-type it safely,
so they are never given other GPU indices: before the round they resume on any node(s) where the
same indices are free (first the nodes they ran on), or keep waiting with that reason.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from dataclasses import dataclass, field
from typing import Any

from hivebatch.controller.reconcile import Ledger
from hivebatch.db.models import Job
from hivebatch.errors import HivebatchError
from hivebatch.qos import Shape, task_ect, task_latency
from hivebatch.request import JobRequest
from hivebatch.sharing.integration import is_slice


@dataclass
class Place:
    job: Job
    placement: dict[str, list[int]]
    gres: str | None
    shape: tuple[int, int] | None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    ect: dt.datetime | None = None
    preempts: list[int] = field(default_factory=list)
    resumed: bool = False


@dataclass
class Wait:
    job: Job
    reason: str
    rejected: bool = False
    shape: tuple[int, int] | None = None
    predicted_start: dt.datetime | None = None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    ect: dt.datetime | None = None
    latency_s: float | None = None


@dataclass
class Decisions:
    places: list[Place] = field(default_factory=list)
    victims: dict[int, int] = field(
        default_factory=dict
    )  # preempted slurm id -> slurm id of the job taking its GPUs
    waits: list[Wait] = field(default_factory=list)


def gres_for(indices: list[int]) -> str:
    """Typed per-index gres: each GPU index is its own GRES type g<i> (see hadmin slurm-config)."""
    return ",".join(f"gpu:g{i}:1" for i in sorted(indices))


def symmetric_indices(placement: dict[str, list[int]]) -> list[int] | None:
    """The per-node index set when every node uses the same indices (Slurm's gres is per node)."""
    sets = {tuple(sorted(v)) for v in placement.values()}
    return list(next(iter(sets))) if len(sets) == 1 else None


def _epoch(t: dt.datetime) -> float:
    return t.replace(tzinfo=dt.UTC).timestamp()


def _from_epoch(x: float | None) -> dt.datetime | None:
    if x is None or not math.isfinite(x):
        return None
    try:
        return dt.datetime.fromtimestamp(x, dt.UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def check_request(job: Job, sj: Any, spec: Any) -> tuple[JobRequest | None, str | None]:
    """The job's request, or the plain-words reason it cannot be scheduled as it stands."""
    try:
        # validated when it was read from the Slurm comment (JobRequest.from_comment); not again each cycle
        req = JobRequest(**(job.request or {}))
    except (TypeError, HivebatchError) as exc:
        return None, f"its hivebatch request is unreadable ({exc}); resubmit it with hsub"
    if req.vc not in spec.vcs:
        return None, f"unknown VC {req.vc!r}: the config has {', '.join(sorted(spec.vcs))}"
    if sj is not None and sj.account and sj.account != req.vc:
        return (
            None,
            f"the request names VC {req.vc} but the Slurm account is {sj.account}; resubmit with -A {req.vc}",
        )
    if sj is not None and sj.qos and sj.qos != req.qos:
        return (
            None,
            f"the request names class {req.qos} but the Slurm QOS is {sj.qos}; resubmit with -q {req.qos}",
        )
    tres = str(getattr(sj, "tres_per_node", "") or "") if sj is not None else ""
    if "gpu" in tres.lower():
        from hivebatch.slurm.parse import typed_request

        asked, _shards = typed_request(tres)
        granted = sorted(int(g.split(":")[1][1:]) for g in (job.gres or "").split(",") if g.count(":") == 2)
        if not job.gres or asked != granted:
            # re-typing a gres makes Slurm grant old and new GPUs together, so such a job is never placed
            return None, (
                f"the job asks Slurm for GPUs itself ({tres}); cancel it and resubmit with hsub, which adds no gres"
            )
    if req.gpu_type is not None and req.gpu_type not in spec.gpu_types:
        return None, f"unknown GPU type {req.gpu_type!r}: the cluster has {', '.join(spec.gpu_types)}"
    if req.priority >= 0:
        held = spec.vc_gpus(req.vc, req.gpu_type)
        if req.gpus > held:
            return (
                None,
                f"asks for {req.gpus} GPUs but VC {req.vc} holds only {held}; ask for fewer or use -q opportunistic",
            )
    return req, None


def _gpn(spec: Any, gpu_type: str | None) -> int:
    return int(spec.gpus_per_node(gpu_type or spec.gpu_types[0]))


def default_shape(req: JobRequest, spec: Any) -> tuple[int, int] | None:
    """The shape a request fixes, or the cells' default for a plain job; None lets the QoS model choose."""
    if req.nodes:
        return (req.nodes, req.gpus // req.nodes) if req.gpus % req.nodes == 0 else None
    if req.gpus_per_node:
        return (req.gpus // req.gpus_per_node, req.gpus_per_node)
    return None


def plain_shape(gpus: int, gpn: int) -> tuple[int, int] | None:
    if gpus <= gpn:
        return (1, gpus)
    for n in range(math.ceil(gpus / gpn), gpus + 1):
        if gpus % n == 0 and gpus // n <= gpn:
            return (n, gpus // n)
    return None


class TaskBuilder:
    """JobRequest → qos.Task, with one profile look-up per (model, GPU type, like)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._profiles: dict[tuple[str, str, str | None], tuple[Any, str | None]] = {}

    def profile(self, req: JobRequest) -> tuple[Any, str | None]:
        if not req.model or self.ctx.profiles is None:
            return None, None
        gpu_type = req.gpu_type or self.ctx.spec.gpu_types[0]
        key = (req.model, gpu_type, req.like)
        if key not in self._profiles:
            try:
                self._profiles[key] = self.ctx.profiles.get(req.model, gpu_type=gpu_type, like=req.like)
            except HivebatchError as exc:
                self._profiles[key] = (None, f"{exc}; planned as a plain job")
            except Exception as exc:  # noqa: BLE001 - UnknownModelError may not subclass HivebatchError
                self._profiles[key] = (None, f"{exc}; planned as a plain job")
        return self._profiles[key]

    def task(self, job: Job, req: JobRequest, sj: Any) -> Any:
        from hivebatch.qos import Task

        spec = self.ctx.spec
        prof, _note = self.profile(req)
        shape = default_shape(req, spec)
        usable_model = prof is not None and req.batch_size is not None and req.iters is not None
        if shape is None and not usable_model:
            shape = plain_shape(req.gpus, _gpn(spec, req.gpu_type))
        time_limit = req.time_limit_s or getattr(sj, "time_limit_s", None)
        return Task(
            job_id=str(job.slurm_job_id),
            vc=req.vc,
            cls=req.qos,
            arrival=_epoch(job.submit_time) if job.submit_time else _epoch(self.ctx_now),
            model=prof if usable_model else None,
            batch=req.batch_size if usable_model else None,
            iters=req.iters if usable_model else None,
            gpus=req.gpus,
            shape=Shape(*shape) if shape else None,
            time_limit_s=float(time_limit) if time_limit else None,
            gpu_type=req.gpu_type,
        )

    ctx_now: dt.datetime = dt.datetime(1970, 1, 1)


def _latency(task: Any, shape: Any, ctx: Any) -> float | None:
    from hivebatch.qos import latency

    if task.model is not None and shape is not None:
        try:
            return float(latency(task.model, task.batch, task.iters, shape, ctx.platform.overhead_s))
        except Exception:  # noqa: BLE001 - a shape outside the model's range: fall back to the time limit
            pass
    return float(task.time_limit_s) if task.time_limit_s else None


def decide(ctx: Any, ledger: Ledger, now: dt.datetime) -> Decisions:
    from hivebatch.scheduler import schedule_round

    spec = ctx.spec
    alloc = ledger.alloc
    out = Decisions()
    builder = TaskBuilder(ctx)
    builder.ctx_now = now
    now_s = _epoch(now)

    candidates = [
        j
        for j in ledger.jobs.values()
        if not j.foreign
        and j.intent is None
        and j.state in ("queued", "preempted", "rejected")
        and j.slurm_job_id in ledger.slurm
        and ledger.slurm[j.slurm_job_id].held
    ]
    candidates.sort(key=lambda j: (j.submit_time or now, j.slurm_job_id))
    tasks: list[Any] = []
    slices: list[tuple[Job, JobRequest, Any]] = []
    typed: list[tuple[Job, JobRequest]] = []
    untyped: list[tuple[Job, JobRequest, Any]] = []
    reqs: dict[str, tuple[Job, JobRequest]] = {}
    for job in candidates:
        sj = ledger.slurm[job.slurm_job_id]
        req, problem = check_request(job, sj, spec)
        if req is None:
            out.waits.append(Wait(job, problem or "invalid request", rejected=True))
            continue
        if req.gpus == 0:
            out.places.append(Place(job, {}, None, None, predicted_end=None))
            continue
        if ledger.sharing is not None and is_slice(spec, req.gpus, req.gpu_mem_mib, req.gpu_type):
            slices.append((job, req, sj))
            continue
        if job.gres and job.placement:
            typed.append((job, req))
            continue
        untyped.append((job, req, sj))

    # Requeued jobs resume first (they ran before; newer work must not starve them), each only on its
    # old GPU indices. A guaranteed job of the round may still preempt them before they start.
    placed_now: dict[int, Place] = {}
    gmap = alloc.gpu_map()
    typed.sort(key=lambda jr: (-jr[1].priority, jr[0].submit_time or now, jr[0].slurm_job_id))
    idle = sum(1 for g in gmap.values() for u in g.values() if u.job is None and not u.bad and not u.foreign)
    for job, req in typed:
        if req.gpus > idle:
            idx = symmetric_indices(job.placement or {}) or []
            n = len(job.placement or {})
            out.waits.append(
                Wait(
                    job, f"requeued with GPUs {idx} per node; waits until {n} node(s) have those indices free"
                )
            )
            continue
        out_place = _resume_typed(alloc, spec, job, req, ledger.bad_nodes, gmap)
        if isinstance(out_place, Place):
            if str(job.gres or "").startswith("shard:"):
                # it held its GPU as shards before (Slurm keeps that gres): it leaves the rest again
                out_place.gres = job.gres
                _note_whole(ledger.sharing, job, req, out_place.placement)
            idle -= req.gpus
            out.places.append(out_place)
            placed_now[job.slurm_job_id] = out_place
        else:
            out.waits.append(Wait(job, out_place))

    by_sid = {str(j.slurm_job_id): j for j in ledger.jobs.values()}
    if slices:
        _decide_slices(out, ledger.sharing, slices, by_sid, placed_now, now, builder)

    room = Room(alloc, spec, alloc.gpu_map() if typed or slices else gmap)
    for job, req, sj in untyped:
        if room.may_fit(req):
            task = builder.task(job, req, sj)
            tasks.append(task)
            reqs[task.job_id] = (job, req)
        else:
            # cannot start this cycle whatever the policy says: spare the policy and the cells the work
            out.waits.append(
                _hopeless_wait(job, req, lambda j=job, r=req, x=sj: builder.task(j, r, x), room, ctx, now)
            )

    outcomes = schedule_round(
        tasks,
        now_s,
        alloc,
        ctx.policy,
        ctx.platform,
        {t.job_id for t in tasks if reqs[t.job_id][1].priority < 0},
        priority_of=lambda t: reqs[str(t.job_id)][1].priority,
    )
    latencies: dict[int, float | None] = {}
    for o in outcomes:
        job, req = reqs[str(o.task.job_id)]
        shape = (o.shape.d_node, o.shape.d_gpn) if o.shape is not None else None
        slack = _finite(o.slack)
        if o.result == "placed":
            end = _from_epoch(o.predicted_end)
            ect = end + dt.timedelta(seconds=slack) if end is not None and slack is not None else None
            p = Place(job, o.placement, None, shape, predicted_end=end, slack_s=slack, ect=ect)
            victims = [str(v) for v in o.preempted]
            if ledger.sharing is not None:
                # a share cell of the cell core stands for the slices on its GPU
                victims = ledger.sharing.translate_preempted(victims)
            _take_victims(p, victims, by_sid, placed_now, out)
            out.places.append(p)
            placed_now[job.slurm_job_id] = p
        else:
            lat = _latency(o.task, o.shape or o.task.shape, ctx)
            latencies[job.slurm_job_id] = lat
            ect = None
            if lat is not None and slack is not None:
                ect = now + dt.timedelta(seconds=lat + slack)
            out.waits.append(
                Wait(
                    job,
                    o.reason or ("rejected by the cells" if o.result == "rejected" else "waiting for GPUs"),
                    rejected=o.result == "rejected",
                    shape=shape,
                    slack_s=slack,
                    ect=ect,
                    latency_s=lat,
                )
            )

    for place in out.places:
        if place.placement and place.gres is None:
            idx = symmetric_indices(place.placement)
            if idx is None:
                # Slurm's gres is per node: an asymmetric multi-node placement cannot be expressed
                alloc.release(str(place.job.slurm_job_id))
                out.waits.append(
                    Wait(place.job, "no placement with the same GPU indices on every node is free")
                )
                place.placement = {}
                place.gres = "-"
                continue
            place.gres = _whole_gres(ledger.sharing, place.job, reqs, place.placement) or gres_for(idx)
    out.places = [p for p in out.places if p.gres != "-"]
    _estimate_starts(out, ledger, alloc, spec, now)
    return out


def _decide_slices(
    out: Decisions,
    led: Any,
    slices: list[tuple[Job, JobRequest, Any]],
    by_sid: dict[str, Job],
    placed_now: dict[int, Place],
    now: dt.datetime,
    builder: TaskBuilder,
) -> None:
    """GPU slices go through the sharing ledger: binpacked inside the VC's cells, opportunistic ones
    also co-located where the config allows. Requeued slices keep their GPU index (Slurm keeps the
    typed ``shard:gN:k``), guaranteed work goes first, then arrival order. Their predictions are a
    one-GPU job's (a plain job: its time limit)."""
    from hivebatch.sharing.gres import parse_shard_gres

    slices.sort(
        key=lambda x: (
            not (x[0].gres and x[0].placement),
            -x[1].priority,
            x[0].submit_time or now,
            x[0].slurm_job_id,
        )
    )
    for job, req, sj in slices:
        sid = str(job.slurm_job_id)
        lat, ect, slack = _slice_prediction(builder, job, req, sj, now)
        mem = int(req.gpu_mem_mib or 0)
        old = parse_shard_gres(job.gres or "") if job.placement else {}
        if len(old) == 1:
            ((gpu_index, _count),) = old.items()
            d = led.resume(sid, req.vc, mem, req.priority, gpu_index, nodes_first=sorted(job.placement or {}))
        else:
            d = led.place(sid, req.vc, mem, req.priority, req.gpu_type)
        if d.result != "placed":
            rejected = d.result == "rejected"
            out.waits.append(
                Wait(
                    job,
                    d.error or d.reason or "no GPU has room for the slice",
                    rejected=rejected,
                    shape=None if rejected else (1, 1),
                    slack_s=None if rejected else slack,
                    ect=None if rejected else ect,
                    latency_s=None if rejected else lat,
                )
            )
            continue
        end = now + dt.timedelta(seconds=lat) if lat is not None else None
        p = Place(
            job, d.placement, d.gres, (1, 1), predicted_end=end, slack_s=slack, ect=ect, resumed=bool(old)
        )
        _take_victims(p, d.preempted, by_sid, placed_now, out)
        out.places.append(p)
        placed_now[job.slurm_job_id] = p


def _take_victims(
    p: Place, victims: list[Any], by_sid: dict[str, Job], placed_now: dict[int, Place], out: Decisions
) -> None:
    """Book the jobs ``p`` preempts. A victim placed earlier in this very round never started: it is
    taken back and simply keeps waiting instead of being requeued."""
    for victim in victims:
        v = by_sid.get(str(victim))
        if v is None:
            continue
        if v.slurm_job_id in placed_now:
            out.places.remove(placed_now.pop(v.slurm_job_id))
            out.waits.append(Wait(v, f"its GPUs went to job {p.job.slurm_job_id} before it started"))
            continue
        out.victims[v.slurm_job_id] = p.job.slurm_job_id
        p.preempts.append(v.slurm_job_id)


def _whole_gres(
    led: Any, job: Job, reqs: dict[str, tuple[Job, JobRequest]], placement: dict[str, list[int]]
) -> str | None:
    """Shards instead of whole GPUs for a guaranteed job that declared its memory per GPU (--gpu-mem)
    and landed, one GPU per node, where the admin lets others use what it leaves
    (``sharing.allow_mixed_nodes`` / ``colocate``); None: whole GPUs."""
    pair = reqs.get(str(job.slurm_job_id))
    if led is None or pair is None:
        return None
    req = pair[1]
    if req.priority < 0 or not req.gpu_mem_mib:
        return None  # an opportunistic job is preempted first anyway: it never hosts others' slices
    gres = str(led.whole_job_gres(req.vc, placement, req.gpu_mem_mib))
    if not gres.startswith("shard:"):
        return None
    _note_whole(led, job, req, placement)
    return gres


def _note_whole(led: Any, job: Job, req: JobRequest, placement: dict[str, list[int]]) -> None:
    if led is not None and req.priority >= 0 and req.gpu_mem_mib:
        led.note_whole_job(str(job.slurm_job_id), req.vc, req.priority, placement, req.gpu_mem_mib)


def _slice_prediction(
    builder: TaskBuilder, job: Job, req: JobRequest, sj: Any, now: dt.datetime
) -> tuple[float | None, dt.datetime | None, float | None]:
    """(latency s, ECT, slack s) of a slice started now: the same QoS figures as a one-GPU job, so a
    plain slice's duration is its time limit (else the platform's default)."""
    try:
        task = builder.task(job, req, sj)
        lat = float(task_latency(task, Shape(1, 1), builder.ctx.platform))
        ect = _from_epoch(task_ect(task, builder.ctx.platform))
    except Exception:  # noqa: BLE001 - no prediction possible: the slice is still placed, without figures
        return None, None, None
    slack = (ect - now).total_seconds() - lat if ect is not None else None
    return lat, ect, slack


def _resume_typed(
    alloc: Any, spec: Any, job: Job, req: JobRequest, bad: set[str], gmap: dict[str, dict[int, Any]]
) -> Place | str:
    """Place a requeued job on the same GPU indices it had (any nodes), or say why it waits."""
    old = {n: sorted(v) for n, v in (job.placement or {}).items()}
    idx = symmetric_indices(old)
    if idx is None:
        return "its earlier placement had different GPU indices per node; it cannot be re-placed"
    want_nodes = len(old)
    gpu_type = req.gpu_type
    node_type = {n.name: n.gpu_type for n in spec.nodes}

    def free_on(node: str) -> bool:
        gpus = gmap.get(node, {})
        for i in idx:
            use = gpus.get(i)
            if use is None or use.bad or use.foreign or use.job is not None:
                return False
            if use.vc is not None and (req.priority < 0 or use.vc != req.vc):
                return False  # bound to another VC's cell (or to any cell: opportunistic work keeps off)
        return True

    order = sorted(old) + sorted(n for n in gmap if n not in old)
    chosen = [
        n for n in order if n not in bad and (gpu_type is None or node_type.get(n) == gpu_type) and free_on(n)
    ][:want_nodes]
    if len(chosen) < want_nodes:
        return f"requeued with GPUs {idx} per node; waits until {want_nodes} node(s) have those indices free"
    placement = {n: list(idx) for n in chosen}
    decision = alloc.adopt(str(job.slurm_job_id), req.vc, req.priority, placement)
    if decision.result != "placed":
        return f"requeued with GPUs {idx} per node; {decision.reason or decision.error or 'its VC has no room now'}"
    for n in chosen:  # keep the caller's map current for the next requeued job
        for i in idx:
            gmap[n][i] = _Taken(req.vc, str(job.slurm_job_id))
    return Place(job, placement, gres_for(idx), (want_nodes, len(idx)), resumed=True)


@dataclass(frozen=True)
class _Taken:
    vc: str | None
    job: str | None
    opportunistic: bool = False
    bad: bool = False
    foreign: bool = False


class Room:
    """A quick upper bound on what could start now, to spare the policy and the cells hopeless tasks.

    A guaranteed job can use its VC's free cells plus the GPUs of lower-priority jobs of its VC
    (which it may preempt); an opportunistic job only free GPUs that no VC cell holds.
    """

    def __init__(self, alloc: Any, spec: Any, gmap: dict[str, dict[int, Any]]) -> None:
        self.free = {vc: int(alloc.vc_view(vc).gpus_free) for vc in spec.vcs}
        self.total = {vc: int(spec.vc_gpus(vc)) for vc in spec.vcs}
        self.by_prio: dict[str, dict[int, int]] = {}
        for st in alloc.jobs().values():
            if st.priority >= 0:
                d = self.by_prio.setdefault(st.vc, {})
                d[st.priority] = d.get(st.priority, 0) + int(st.gpus)
        self.unbound = sum(
            1
            for gpus in gmap.values()
            for use in gpus.values()
            if use.vc is None and use.job is None and not use.bad and not use.foreign
        )

    def preemptible(self, vc: str, priority: int) -> int:
        return sum(g for p, g in self.by_prio.get(vc, {}).items() if p < priority)

    def may_fit(self, req: JobRequest) -> bool:
        if req.priority < 0:
            return req.gpus <= self.unbound
        return req.gpus <= self.free.get(req.vc, 0) + self.preemptible(req.vc, req.priority)

    def reason(self, req: JobRequest) -> str:
        # no live counts in the text: a reason that changed with every start and finish would
        # make an event (and a log line) per waiting job per cycle
        if req.priority < 0:
            return f"waiting for idle GPUs: it needs {req.gpus}, fewer are free outside the VCs' cells now"
        return (
            f"waiting for VC {req.vc}'s GPUs: it needs {req.gpus} of the VC's {self.total.get(req.vc, 0)}, "
            "fewer are free now"
        )


def _hopeless_wait(job: Job, req: JobRequest, make_task: Any, room: Room, ctx: Any, now: dt.datetime) -> Wait:
    """A job that cannot start this cycle: its reason, and its ECT and latency (computed once, then kept)."""
    lat: float | None = job.latency_s
    ect = job.expected_completion
    if lat is None or ect is None:
        try:
            task = make_task()
            shape = task.shape or Shape(*(plain_shape(req.gpus, _gpn(ctx.spec, req.gpu_type)) or (1, 1)))
            lat = float(task_latency(task, shape, ctx.platform))
            ect = _from_epoch(task_ect(task, ctx.platform))
        except Exception:  # noqa: BLE001 - no prediction possible: the job still waits, without figures
            lat = lat if lat is not None else None
    slack = (ect - now).total_seconds() - lat if ect is not None and lat is not None else None
    shape = (job.shape_nodes, job.shape_gpn) if job.shape_nodes and job.shape_gpn else None
    return Wait(job, room.reason(req), shape=shape, slack_s=slack, ect=ect, latency_s=lat)


def _estimate_starts(out: Decisions, ledger: Ledger, alloc: Any, spec: Any, now: dt.datetime) -> None:
    """A rough predicted start for waiting jobs: when enough of their VC's GPUs free up, in queue order.

    Shape and fragmentation are ignored; a job whose length nobody knows blocks the estimate behind it.
    """
    release: dict[str, list[tuple[float, int]]] = {}
    used: dict[str, int] = {}
    inf = math.inf
    running = {
        j.slurm_job_id: j for j in ledger.jobs.values() if j.state in ("placed", "running") and not j.foreign
    }
    placed_end = {p.job.slurm_job_id: p.predicted_end for p in out.places}
    cell_end = _shared_gpu_ends(ledger.sharing, running, placed_end, now) if ledger.sharing else {}
    for state in alloc.jobs().values():
        job = running.get(int(state.job_id)) if str(state.job_id).isdigit() else None
        pool = "*opportunistic" if state.priority < 0 else state.vc
        end = cell_end.get(str(state.job_id), inf)
        if job is not None:
            if job.predicted_end is not None:
                end = max(_epoch(job.predicted_end), _epoch(now))
            elif job.request and job.request.get("time_limit_s") and job.start_time is not None:
                end = _epoch(job.start_time) + float(job.request["time_limit_s"])
        release.setdefault(pool, []).append((end, int(state.gpus)))
        used[pool] = used.get(pool, 0) + int(state.gpus)
    for p in out.places:
        if p.placement and not (p.gres or "").startswith("shard:"):  # a slice's GPU is its shared cell's
            pool = "*opportunistic" if p.job.priority < 0 else (p.job.vc_name or "")
            end = _epoch(p.predicted_end) if p.predicted_end else inf
            release.setdefault(pool, []).append((end, sum(len(v) for v in p.placement.values())))
    for heap in release.values():
        heapq.heapify(heap)
    total_gpus = sum(len(n.gpu_indices) for n in spec.nodes)
    guaranteed_used = sum(v for k, v in used.items() if k != "*opportunistic")
    free: dict[str, float] = {}
    clock: dict[str, float] = {}
    now_s = _epoch(now)
    for w in out.waits:
        if w.rejected:
            continue
        job = w.job
        pool = "*opportunistic" if job.priority < 0 else (job.vc_name or "")
        if pool not in free:
            cap = total_gpus - guaranteed_used if pool == "*opportunistic" else spec.vc_gpus(pool)
            free[pool] = cap - used.get(pool, 0)
            clock[pool] = now_s
        need = job.gpus or 0
        heap = release.setdefault(pool, [])
        t = clock[pool]
        while free[pool] < need and heap:
            end, n = heapq.heappop(heap)
            t = max(t, end)
            free[pool] += n
        if free[pool] < need or not math.isfinite(t):
            clock[pool] = inf
            continue
        clock[pool] = t
        w.predicted_start = _from_epoch(t)
        if w.latency_s is not None:
            w.predicted_end = _from_epoch(t + w.latency_s)
            heapq.heappush(heap, (t + w.latency_s, need))
        else:
            heapq.heappush(heap, (inf, need))
        free[pool] -= need


def _shared_gpu_ends(
    led: Any, running: dict[int, Job], placed_end: dict[int, dt.datetime | None], now: dt.datetime
) -> dict[str, float]:
    """When each shared GPU cell of the cell core frees up: when the last slice on it ends."""
    out: dict[str, float] = {}
    for g in led.gpus().values():
        if not g.slices or not str(g.holder).startswith("share"):
            continue
        end = _epoch(now)
        for sid in g.slices:
            jid = int(sid) if sid.isdigit() else -1
            job = running.get(jid)
            t = placed_end.get(jid) if jid in placed_end else (job.predicted_end if job is not None else None)
            if t is None:
                end = math.inf
                break
            end = max(end, _epoch(t))
        out[g.holder] = end
    return out
