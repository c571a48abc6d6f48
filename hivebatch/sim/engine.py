"""Event-driven simulation on a virtual clock, driving the real cell core and QoS policies.

Events are arrivals, completions and node health changes. After all events of one instant are
applied, ``hivebatch.scheduler.schedule_round`` (the controller's own glue) plans the waiting jobs
with the chosen policy and binds them through the allocator: ``CellAllocator`` in cells mode,
``QuotaPool`` (Slurm GrpTRES-like GPU counts) in quota mode. A placed job runs for the time the
performance model gives for the placement it got. Preempted (opportunistic) jobs go back to the
queue and start over, as a Slurm requeue does.

Only the VCs touched by an event are re-planned in cells mode: a VC's cells are its own, so nothing
another VC does can let one of its waiting jobs start. In quota mode every completion re-plans
everyone, since the pool is shared.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hivebatch.cells import CellAllocator
from hivebatch.errors import HivebatchError
from hivebatch.fairshare import DecayedUsage, Run
from hivebatch.qos import Shape, Task, get_policy, task_ect
from hivebatch.request import CLASS_PRIORITY
from hivebatch.reservation import DEFAULT_STARVE_AFTER_S
from hivebatch.scheduler import Outcome, lowest_priority, schedule_round, vc_free_gpus
from hivebatch.sim.indices import free_gpus, held_back, note_pins, remember
from hivebatch.sim.notice import SimNotice, progress_kept, told
from hivebatch.sim.notice import prime as prime_notices
from hivebatch.sim.quota import QuotaPool
from hivebatch.sim.resize import Resizing
from hivebatch.sim.resize import after_round as grow_runs
from hivebatch.sim.resize import before_round as shrink_runs
from hivebatch.sim.runtime import RuntimeModel, tightest_shape
from hivebatch.sim.workload import SimJob

MODES = ("cells", "quota")

# Order of events at the same instant. A cycle comes first and decides on what happened before it: a job
# submitted, or ended, at the cycle's instant is seen by the next cycle, as the controller's squeue at that
# instant would not show it yet.
_CYCLE, _COMPLETE, _LEAVE, _NODE, _ARRIVE = 0, 1, 2, 3, 4


@dataclass
class BadNode:
    node: str
    start_s: float
    end_s: float | None = None


@dataclass
class JobRecord:
    job: SimJob
    task: Any
    expected_end: float
    ref_s: float
    best_s: float
    min_gpu_s: float = 0.0  # least GPU time on any placement (the work part of the makespan bound)
    start: float | None = None
    first_start: float | None = None
    end: float | None = None
    run_s: float = 0.0
    shape: Shape | None = None
    placement: dict[str, list[int]] = field(default_factory=dict)
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    rejected: str | None = None
    token: int = 0
    leaving: float | None = None  # told to leave: the end of its notice
    told_by: str | None = None  # the job it was told to leave for, until it is placed again
    saved_at: float | None = None  # when it checkpointed on its notice's signal
    saved_fraction: float = 0.0  # of the whole job's work, kept by checkpoints
    predicted_end: float | None = None  # what the scheduler expected when it started the current run
    locked: dict[str, list[int]] | None = None  # requeued: the GPU indices it must find free again
    untyped: bool | None = None  # pinned as a plain GPU count at its first placement (None: not yet)
    own_shape: Shape | None = None  # resizable runs: the policy's shape, which a grown job goes back to
    resize_s: float = 0.0  # resizable runs: what the resize that began the current run cost it
    resizes: int = 0
    resized_run_s: float = 0.0  # time run before the resizes since it was placed (kept, not lost)

    def ran_s(self, now: float) -> float:
        """How long its current run has run by ``now``: 0 until it starts, which may be a moment after
        it was placed (``Simulation``'s start latency)."""
        assert self.start is not None
        return max(0.0, now - self.start)

    @property
    def queue_s(self) -> float:
        """Time not spent in the final run: waiting, plus runs lost to preemption."""
        assert self.end is not None
        return self.end - self.job.arrival - self.run_s - self.resized_run_s

    @property
    def met_qos(self) -> bool:
        return self.end is not None and self.end <= self.expected_end + 1e-6


@dataclass
class SimRun:
    policy: str
    mode: str
    records: list[JobRecord]
    total_gpus: int
    busy_gpu_s: float
    events: int
    rounds: int


class Simulation:
    def __init__(
        self,
        spec: Any,
        jobs: list[SimJob],
        policy: str,
        mode: str,
        runtime: RuntimeModel,
        platform: Any,
        *,
        bad_nodes: list[BadNode] | None = None,
        opportunistic: bool = True,
        progress: Callable[[int, int], None] | None = None,
        after_round: Callable[[Simulation, float, list[Outcome]], None] | None = None,
        pool_nodes: list[str] | None = None,
        notice: SimNotice | None = None,
        backfill: bool = False,
        fairshare_half_life_s: float | None = None,
        starve_after_s: float = DEFAULT_STARVE_AFTER_S,
        cycle_s: float | None = None,
        cycle_phase_s: float = 0.0,
        class_priority: bool = False,
        start_latency_s: float = 0.0,
        resizing: Resizing | None = None,
    ) -> None:
        """``pool_nodes``: quota mode only, the nodes the shared pool has (default: every node).
        ``notice``: cells mode only, preemption with notice (hivebatch.sim.notice); None: at once.

        ``backfill``: give each VC's waiting head a reservation (hivebatch.reservation) from the
        running jobs' predicted ends; a job waiting ``starve_after_s`` becomes its VC's head. ``fairshare_half_life_s``: order a VC's jobs of one class by
        their users' decayed GPU-hours (hivebatch.fairshare); None leaves the policy's order.

        ``cycle_s``: decide only at multiples of this period, as the controller's cycle does (what
        happened in between waits for the next cycle); None decides at every event. ``cycle_phase_s``:
        the cycles fall at ``phase + k * cycle_s`` (where a live controller's cycles fall relative to
        the submissions is chance, and moves the waits; ``hivebatch.replay.compare.phase_spread``).
        ``class_priority``: the cell core ranks guaranteed jobs by class (urgent > prior > normal: a
        higher class may take a lower one's GPUs, and a lower one's reservation does not hold it back),
        as the controller's does; False ranks them alike and leaves the classes to the policy.
        ``start_latency_s``: how long after the decision the job starts, holding its GPUs meanwhile (on
        Slurm: the controller's update and release, then slurmctld's scheduling pass); counted as waiting.
        ``resizing``: cells mode only, running model jobs grow and shrink (hivebatch.sim.resize), a what-if
        the controller cannot do on Slurm 22.05.
        """
        if mode not in MODES:
            raise HivebatchError(f"unknown mode {mode!r}: use cells or quota")
        self.spec = spec
        self.jobs = jobs
        self.policy_name = policy
        self.policy = get_policy(policy)
        self.strict = bool(getattr(self.policy, "strict_order", False))
        self.mode = mode
        self.runtime = runtime
        self.platform = platform
        self.bad_nodes = bad_nodes or []
        self.opportunistic = opportunistic and mode == "cells"
        self.progress = progress
        self.after_round = after_round
        self.notice = notice if mode == "cells" else None
        self.backfill = backfill
        self.starve_after_s = starve_after_s
        if cycle_s is not None and cycle_s <= 0:
            raise HivebatchError(f"cycle_s must be > 0, got {cycle_s}")
        self.cycle_s = cycle_s
        if cycle_s is not None and not 0 <= cycle_phase_s < cycle_s:
            raise HivebatchError(f"cycle_phase_s must be in [0, cycle_s), got {cycle_phase_s}")
        self.cycle_phase_s = cycle_phase_s
        self.class_priority = class_priority
        if start_latency_s < 0:
            raise HivebatchError(f"a start latency cannot be negative (got {start_latency_s:g} s)")
        self.start_latency_s = start_latency_s
        self.resizing = resizing if mode == "cells" else None
        self._due: tuple[float, set[str], bool] | None = None  # the next cycle and what waits for it
        self.usage = DecayedUsage(fairshare_half_life_s) if fairshare_half_life_s else None
        self.vc_gpus = {vc: spec.vc_gpus(vc) for vc in spec.vcs}
        if mode == "cells":
            self.alloc: Any = CellAllocator(spec)
        else:
            keep = set(pool_nodes) if pool_nodes is not None else None
            self.alloc = QuotaPool([n for n in spec.nodes if keep is None or n.name in keep], self.vc_gpus)
        self.used: dict[str, int] = dict.fromkeys(self.vc_gpus, 0)  # guaranteed GPUs in use per VC
        self.waiting: dict[str, JobRecord] = {}  # insertion order = arrival order
        self.running: dict[str, JobRecord] = {}
        self.records: dict[str, JobRecord] = {}
        self.opp_ids: set[str] = set()
        self.bad_now: set[str] = set()
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.busy_gpu_s = 0.0
        self.events = 0
        self.rounds = 0
        self.rejected = 0

    # -- set-up ---------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, data))

    def _task_for(self, job: SimJob) -> Any:
        if job.is_trace_job:
            shape = tightest_shape(job.gpus, self.platform.gpus_per_node, self.platform.max_nodes)
            return Task(
                job_id=job.job_id,
                vc=job.vc,
                cls=job.cls,
                arrival=job.arrival,
                model=None,
                batch=None,
                iters=None,
                gpus=job.gpus,
                shape=shape,
                time_limit_s=job.time_limit_s or job.duration_s,
                gpu_type=job.gpu_type,
                user=job.user,
            )
        return Task(
            job_id=job.job_id,
            vc=job.vc,
            cls=job.cls,
            arrival=job.arrival,
            model=self.runtime.profile_for(job),
            batch=job.batch,
            iters=job.iters,
            gpus=job.gpus,
            shape=None,
            time_limit_s=None,
            gpu_type=job.gpu_type,
            user=job.user,
        )

    def _record_for(self, job: SimJob) -> JobRecord:
        task = self._task_for(job)
        return JobRecord(
            job=job,
            task=task,
            expected_end=task_ect(task, self.platform),  # e_t exactly as the policies see it
            ref_s=self.runtime.reference_latency(job),
            best_s=self.runtime.best_run_time(job),
            min_gpu_s=self.runtime.min_gpu_seconds(job),
        )

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> SimRun:
        for job in self.jobs:
            if job.job_id in self.records:
                raise HivebatchError(f"job id {job.job_id} appears twice in the workload")
            self.records[job.job_id] = self._record_for(job)
            self._push(job.arrival, _ARRIVE, job.job_id)
        for b in self.bad_nodes:
            self._push(b.start_s, _NODE, (b.node, True))
            if b.end_s is not None:
                self._push(b.end_s, _NODE, (b.node, False))
        total = len(self.jobs)
        finished = 0
        while self._heap:
            now = self._heap[0][0]
            dirty: set[str] = set()
            freed = False
            while self._heap and self._heap[0][0] == now:
                _, kind, _, data = heapq.heappop(self._heap)
                self.events += 1
                if kind == _COMPLETE:
                    rec = self._this_run(data)
                    if rec is None:
                        continue  # a run that was preempted
                    self._finish(rec, now)
                    finished += 1
                    dirty.add(rec.job.vc)
                    freed = True
                elif kind == _LEAVE:
                    rec = self._this_run(data)
                    if rec is None:
                        continue  # it completed during its notice
                    self._preempt(rec, now)
                    dirty.update(self.vc_gpus)  # the job waiting for its GPUs may be of any VC
                    freed = True
                elif kind == _CYCLE:
                    self._cycle(now, set(), False)
                elif kind == _ARRIVE:
                    rec = self.records[data]
                    self.waiting[data] = rec
                    if rec.job.opportunistic and self.opportunistic:
                        self.opp_ids.add(data)
                    dirty.add(rec.job.vc)
                else:
                    node, bad = data
                    self._set_node(node, bad)
                    dirty.update(self.vc_gpus)
                    freed = True
            if self.mode == "quota" and freed or self.bad_now:
                dirty.update(self.vc_gpus)
            if self.cycle_s is None:
                self._schedule(now, dirty, freed)
            else:
                self._cycle(now, dirty, freed)
            if self.progress is not None:
                self.progress(finished + self.rejected, total)
        return SimRun(
            policy=self.policy_name,
            mode=self.mode,
            records=list(self.records.values()),
            total_gpus=sum(self.vc_gpus.values()) if self.mode == "quota" else self._cluster_gpus(),
            busy_gpu_s=self.busy_gpu_s,
            events=self.events,
            rounds=self.rounds,
        )

    def _cycle(self, now: float, dirty: set[str], freed: bool) -> None:
        """Keep what changed for the next cycle; decide when this instant is that cycle."""
        assert self.cycle_s is not None
        if self._due is not None:
            tick, was_dirty, was_freed = self._due
            dirty, freed = dirty | was_dirty, freed or was_freed
            if now < tick:
                self._due = (tick, dirty, freed)
                return
            self._due = None
            self._schedule(now, dirty, freed)
            return
        if dirty or freed:
            phase = self.cycle_phase_s
            tick = ((now - phase) // self.cycle_s + 1) * self.cycle_s + phase
            self._due = (tick, dirty, freed)
            self._push(tick, _CYCLE, None)

    def _this_run(self, data: tuple[str, int]) -> JobRecord | None:
        """The running job an event was pushed for, None when that run has ended since."""
        jid, token = data
        rec = self.running.get(jid)
        return rec if rec is not None and rec.token == token else None

    def _cluster_gpus(self) -> int:
        return sum(len(n.gpu_indices) for n in self.spec.nodes)

    def _set_node(self, node: str, bad: bool) -> None:
        if bad:
            self.alloc.set_node_bad(node)
            self.bad_now.add(node)
        else:
            self.alloc.set_node_healthy(node)
            self.bad_now.discard(node)

    def _count_usage(self, rec: JobRecord, now: float) -> None:
        """The run that ends now counts towards its user's fairshare usage."""
        if self.usage is not None and rec.job.user is not None and rec.start is not None:
            self.usage.add(Run(rec.job.user, _gpus(rec.placement), min(rec.start, now), now))

    def _usage(self, now: float) -> dict[str, float] | None:
        if self.usage is None:
            return None
        running = (
            Run(r.job.user, _gpus(r.placement), min(r.start, now), now)
            for r in self.running.values()
            if r.job.user is not None and r.start is not None
        )
        return self.usage.at(now, running)

    def _ends(self) -> dict[str, float] | None:
        if not self.backfill:
            return None
        return {jid: r.predicted_end for jid, r in self.running.items() if r.predicted_end is not None}

    def _finish(self, rec: JobRecord, now: float) -> None:
        self._count_usage(rec, now)
        del self.running[rec.job.job_id]
        self.alloc.release(rec.job.job_id)
        if rec.job.job_id not in self.opp_ids:
            self.used[rec.job.vc] -= _gpus(rec.placement)
        self.opp_ids.discard(rec.job.job_id)
        rec.end = now

    def free_by_vc(self) -> dict[str, int]:
        """VC -> its guaranteed GPUs not in use."""
        return vc_free_gpus(self.vc_gpus, self.used.items())

    def done_fraction(self, rec: JobRecord, now: float) -> float:
        """The share of the whole job's work done by ``now``: what earlier runs kept and the current run."""
        assert rec.start is not None
        work = rec.run_s - rec.resize_s
        if work <= 0:
            return 1.0
        ran = min(work, max(0.0, now - rec.start - rec.resize_s))
        return rec.saved_fraction + (1.0 - rec.saved_fraction) * ran / work

    def rerun(
        self,
        rec: JobRecord,
        now: float,
        placement: dict[str, list[int]],
        shape: Shape,
        done: float,
        cost_s: float,
    ) -> None:
        """``rec``, whose cells the allocator has just changed, runs on from ``done`` of its work on
        ``placement``, ``cost_s`` later (hivebatch.sim.resize)."""
        assert rec.start is not None
        self._count_usage(rec, now)
        old_gpus = _gpus(rec.placement)
        self.busy_gpu_s -= max(0.0, rec.start + rec.run_s - now) * old_gpus
        rec.resized_run_s += max(0.0, now - rec.start)
        rec.placement = placement
        rec.shape = shape
        rec.saved_fraction = done
        rec.resize_s = cost_s
        rec.run_s = cost_s + self.runtime.run_time(rec.job, placement) * (1.0 - done)
        rec.start = max(now, rec.start)
        rec.predicted_end = rec.start + rec.run_s
        rec.resizes += 1
        rec.token += 1
        self.used[rec.job.vc] += _gpus(placement) - old_gpus
        self.busy_gpu_s += rec.run_s * _gpus(placement)
        self._push(rec.start + rec.run_s, _COMPLETE, (rec.job.job_id, rec.token))

    def _schedule(self, now: float, dirty: set[str], freed: bool) -> None:
        if self.resizing is None:
            self._plan_rounds(now, dirty, freed)
            return
        back = shrink_runs(self, now)
        self._plan_rounds(now, dirty | back, freed or bool(back))
        grow_runs(self, now)

    def _plan_rounds(self, now: float, dirty: set[str], freed: bool) -> None:
        for _ in range(100):  # re-plan after preemptions; bounded in case two jobs keep trading GPUs
            held, ready = held_back(self)
            if freed:
                dirty = dirty | ready
            limits = self.free_by_vc()
            noticing = {r.told_by for r in self.running.values() if r.leaving is not None and r.told_by}
            claimed = {r.told_by for r in self.waiting.values() if r.told_by}  # preemptors victims wait for
            lowest = self._lowest_classes()
            # A fixed-size job bigger than its VC's free GPUs would only come back "waiting"; leaving
            # it out of the round saves planning it (unless a strict-order policy must see the head,
            # backfill must reserve for it, or its class may preempt: then even with none free).
            tasks = [
                r.task
                for jid, r in self.waiting.items()
                # a victim does not come back while the job it left its GPUs for waits on other
                # victims' notices (as in the controller)
                if (r.told_by is None or r.told_by not in self.waiting or r.told_by not in noticing)
                and jid not in held
                and (
                    (jid in self.opp_ids and (freed or r.job.vc in dirty))
                    or (
                        r.job.vc in dirty
                        and (limits[r.job.vc] > 0 or self._outranks(r.task, lowest))
                        and (
                            self.strict
                            or self.backfill
                            or self.class_priority  # it may take a lower class's GPUs
                            or r.task.model is not None
                            or r.job.gpus <= limits[r.job.vc]
                        )
                    )
                )
            ]
            if not tasks:
                return
            self.rounds += 1
            prime_notices(self, now)
            free_before = free_gpus(self)
            outcomes = schedule_round(
                tasks,
                now,
                self.alloc,
                self.policy,
                self.platform,
                self.opp_ids,
                limits=limits,
                lowest=lowest,
                priority_of=self.priority_of if self.class_priority else None,
                ends=self._ends(),
                usage=self._usage(now),
                starve_after_s=self.starve_after_s,
            )
            for rec, leave_at in told(self, now):
                self._push(leave_at, _LEAVE, (rec.job.job_id, rec.token))
            dirty = set()
            freed = False
            note_pins(self, outcomes, free_before)
            for o in outcomes:
                jid = str(o.task.job_id)
                rec = self.records[jid]
                if o.result == "placed":
                    self._start(rec, o, now)
                    if jid in claimed:
                        dirty.add(rec.job.vc)  # its victims may come back now
                    for victim in o.preempted:
                        self._preempt(self.records[victim], now)
                        dirty.add(self.records[victim].job.vc)
                        freed = True
                elif o.result == "rejected":
                    del self.waiting[jid]
                    rec.rejected = o.reason or "rejected"
                    self.rejected += 1
            if self.after_round is not None:
                self.after_round(self, now, outcomes)
            if not dirty:
                return

    def _lowest_classes(self) -> dict[str, int]:
        """VC -> the lowest cell priority among its running guaranteed jobs (with class_priority)."""
        if not self.class_priority:
            return {}
        return lowest_priority(
            (r.job.vc, self.priority_of(r.task)) for jid, r in self.running.items() if jid not in self.opp_ids
        )

    def _outranks(self, task: Task, lowest: dict[str, int]) -> bool:
        """Whether ``task`` may take GPUs from one of its VC's running jobs (the cell core ranks by class)."""
        return self.class_priority and task.vc in lowest and self.priority_of(task) > lowest[task.vc]

    def priority_of(self, task: Task) -> int:
        jid = str(task.job_id)
        return CLASS_PRIORITY["opportunistic" if jid in self.opp_ids else self.records[jid].job.cls]

    def _start(self, rec: JobRecord, o: Outcome, now: float) -> None:
        jid = rec.job.job_id
        del self.waiting[jid]
        rec.placement = o.placement
        rec.shape = rec.own_shape = o.shape
        rec.resize_s = rec.resized_run_s = 0.0
        run = self.runtime.run_time(rec.job, o.placement) * (1.0 - rec.saved_fraction)
        rec.run_s = run
        rec.leaving = rec.saved_at = rec.told_by = rec.locked = None
        rec.start = now + self.start_latency_s
        rec.predicted_end = o.predicted_end
        if rec.first_start is None:
            rec.first_start = rec.start
        rec.token += 1
        self.running[jid] = rec
        if jid not in self.opp_ids:
            self.used[rec.job.vc] += _gpus(o.placement)
        self.busy_gpu_s += run * _gpus(o.placement)
        self._push(rec.start + run, _COMPLETE, (jid, rec.token))

    def _preempt(self, rec: JobRecord, now: float) -> None:
        """Requeue a preempted job; the cell core took its GPUs back already, or, when it had a notice,
        they are given back here."""
        jid = rec.job.job_id
        if jid not in self.running:
            return
        self._count_usage(rec, now)
        del self.running[jid]
        assert rec.start is not None
        gpus = _gpus(rec.placement)
        done = rec.ran_s(now)
        self.busy_gpu_s -= (rec.run_s - done) * gpus  # the part it will not run now
        kept = progress_kept(rec)
        # a checkpoint keeps the run up to its signal; the time spent saving is lost all the same
        since = rec.start if rec.saved_at is None else max(rec.saved_at, rec.start)
        rec.lost_gpu_s += max(0.0, now - since) * gpus
        rec.saved_fraction = kept
        if rec.leaving is not None:
            self.alloc.release(jid)  # it kept its cells through its notice
        if jid not in self.opp_ids:
            self.used[rec.job.vc] -= gpus
        # a job Slurm had not started yet is held again, not requeued: no run ends, no requeue delay
        started = now >= rec.start
        if started:
            rec.preemptions += 1
        elif rec.first_start == rec.start:
            rec.first_start = None
        rec.token += 1
        rec.start = None
        rec.run_s = 0.0
        if started:  # one taken back before its start was re-planned within this instant's round
            remember(self, rec)
        rec.placement = {}
        delay = self.notice.requeue_delay_s if self.notice is not None and started else 0.0
        if delay > 0:
            self._push(now + delay, _ARRIVE, jid)  # back in the queue when Slurm lets it start again
        else:
            self.waiting[jid] = rec


def _gpus(placement: dict[str, list[int]]) -> int:
    return sum(len(g) for g in placement.values())
