"""Resizable runs, a what-if of the simulator: a running model job grows into its VC's idle GPUs and
gives GPUs back when a job of its VC waits.

A resize keeps the work done (a checkpoint) and costs the resized job ``cost_s`` of run. On Slurm that
would be its save and restart, a controller cycle and slurmctld's requeue delay (AuthInfo's
cred_expire + 1). The controller cannot resize a job on Slurm 22.05: a requeued job keeps the typed
GPUs of its last run, and an update of its gres is merged with them
(tests/fixtures/slurm/scontrol_retyped_gres.txt). Only the simulator has it, to measure what it would
be worth (``bench/bench_sim.py makespan --resize-cost``, docs/simulate.md).

* **Grow.** While nothing of its VC waits, a job takes the VC's idle GPUs when that ends it at least
  ``min_gain`` of its remaining run and twice the cost sooner. A job not started yet grows for free.
* **Back to its own shape.** When a job of its VC waits, a grown job goes back to the shape the
  policy chose for it.
* **Give back.** When a waiting task that could meet its ECT on the whole VC cannot on what is free,
  running jobs that still meet their own ECT shrink, most slack first, each to a narrower shape that
  still meets it.

Only jobs whose GPU count the policy chooses are resized; opportunistic jobs are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hivebatch.cells import Request
from hivebatch.errors import HivebatchError
from hivebatch.qos import Shape
from hivebatch.qos.placement import _free_choice, choose_qos, shape_table

if TYPE_CHECKING:
    from hivebatch.sim.engine import JobRecord, Simulation

# of the grow candidates, how many shapes are tried on the cells (the fastest first)
_TRIED = 4


@dataclass(frozen=True)
class Resizing:
    cost_s: float  # run time a resize costs the resized job
    min_gain: float = 0.1  # a job grows only to end at least this share of its remaining run sooner

    def __post_init__(self) -> None:
        if self.cost_s < 0:
            raise HivebatchError(f"a resize cost cannot be negative (got {self.cost_s:g} s)")
        if not 0 <= self.min_gain < 1:
            raise HivebatchError(f"min_gain must be in [0, 1) (got {self.min_gain:g})")


def before_round(sim: Simulation, now: float) -> set[str]:
    """Grown jobs of VCs with waiting jobs back to their own shapes, then GPUs given back to waiting
    tasks that would miss their ECT on what is free; the VCs that got GPUs back."""
    waiting = _waiting_vcs(sim)
    out: set[str] = set()
    for rec in list(sim.running.values()):
        own = rec.own_shape
        if own is None or rec.shape is None or rec.shape.gpus <= own.gpus or rec.job.vc not in waiting:
            continue
        if _move(sim, rec, now, own):
            out.add(rec.job.vc)
    return out | _give_back(sim, now)


def after_round(sim: Simulation, now: float) -> None:
    """Running jobs of VCs with nothing waiting grown into the idle GPUs, longest remaining run first."""
    waiting = _waiting_vcs(sim)
    limits = sim.free_by_vc()
    jobs = [r for r in _resizable(sim) if r.job.vc not in waiting and limits.get(r.job.vc, 0) > 0]
    for rec in sorted(jobs, key=lambda r: -_end(r)):
        idle = sim.free_by_vc()[rec.job.vc]
        if idle > 0:
            _grow(sim, rec, now, idle)


def _grow(sim: Simulation, rec: JobRecord, now: float, idle: int) -> None:
    assert rec.shape is not None and sim.resizing is not None
    done = sim.done_fraction(rec, now)
    cost = _cost(sim, rec, now)
    table = shape_table(rec.task, sim.platform, rec.shape.gpus + idle)
    lat = {s: float(x) for s, x in zip(table.shapes, table.latency, strict=True)}
    # the model's end on the current shape, so that both sides of the comparison are predictions
    current = now + lat[rec.shape] * (1.0 - done) if rec.shape in lat else _end(rec)
    margin = max(2 * cost, sim.resizing.min_gain * (current - now))
    ends = ((now + cost + x * (1.0 - done), s.gpus, s) for s, x in lat.items() if s.gpus > rec.shape.gpus)
    options = sorted(o for o in ends if o[0] < current - margin)
    for _, _, shape in options[:_TRIED]:
        if _move(sim, rec, now, shape):
            return


def _give_back(sim: Simulation, now: float) -> set[str]:
    assert sim.resizing is not None
    out: set[str] = set()
    for jid, waiting in list(sim.waiting.items()):
        task = waiting.task
        if jid in sim.opp_ids or not _free_choice(task, sim.platform):
            continue
        vc = task.vc
        free = sim.free_by_vc().get(vc, 0)
        whole = choose_qos(task, now + sim.resizing.cost_s, sim.platform, None)
        if not whole.shapes or not whole.meets_qos or choose_qos(task, now, sim.platform, free).meets_qos:
            continue
        need = whole.shapes[0].gpus - free
        donors = sorted(
            (r for r in _resizable(sim) if r.job.vc == vc and _end(r) <= r.expected_end),
            key=lambda r: _end(r) - r.expected_end,
        )
        for rec in donors:
            if need <= 0:
                break
            narrower = _narrower(sim, rec, now, need)
            if narrower is not None and _move(sim, rec, now, narrower):
                rec.own_shape = narrower  # it does not grow back while others wait
                out.add(vc)
                need = whole.shapes[0].gpus - sim.free_by_vc().get(vc, 0)
    return out


def _narrower(sim: Simulation, rec: JobRecord, now: float, need: int) -> Shape | None:
    """The narrower shape that still meets the job's ECT and gives back closest to ``need`` GPUs (at
    least ``need`` if any does), sooner ends first."""
    assert rec.shape is not None
    if rec.shape.gpus <= 1:
        return None
    done = sim.done_fraction(rec, now)
    cost = _cost(sim, rec, now)
    table = shape_table(rec.task, sim.platform, rec.shape.gpus - 1)
    best: tuple[tuple[bool, int, float], Shape] | None = None
    for s, x in zip(table.shapes, table.latency, strict=True):
        end = now + cost + float(x) * (1.0 - done)
        if end > rec.expected_end:
            continue
        give = rec.shape.gpus - s.gpus
        key = (give >= need, -(give - need) if give >= need else give, -end)
        if best is None or key > best[0]:
            best = (key, s)
    return None if best is None else best[1]


def _move(sim: Simulation, rec: JobRecord, now: float, shape: Shape) -> bool:
    """``rec`` restarted on ``shape`` if the cells hold it (without preempting anyone); else unchanged."""
    assert rec.shape is not None
    jid = rec.job.job_id
    old = rec.shape
    cost = _cost(sim, rec, now)
    done = sim.done_fraction(rec, now)
    sim.alloc.release(jid)
    if _fits(sim, rec, shape):
        decision = sim.alloc.allocate(_request(sim, rec, shape))
        sim.rerun(rec, now, decision.placement, shape, done, cost)
        return True
    back = sim.alloc.allocate(_request(sim, rec, old))
    if back.result != "placed" or back.preempted:
        raise HivebatchError(f"job {jid} lost its own cells while being resized")  # the cells just freed them
    rec.placement = back.placement
    return False


def _fits(sim: Simulation, rec: JobRecord, shape: Shape) -> bool:
    decision = sim.alloc.try_allocate(_request(sim, rec, shape))
    return decision.result == "placed" and not decision.preempted


def _request(sim: Simulation, rec: JobRecord, shape: Shape) -> Request:
    return Request(
        job_id=rec.job.job_id,
        vc=rec.job.vc,
        gpus=shape.gpus,
        nodes=shape.d_node,
        gpu_type=rec.task.gpu_type,
        priority=sim.priority_of(rec.task) if sim.class_priority else 0,
    )


def _cost(sim: Simulation, rec: JobRecord, now: float) -> float:
    """What a resize costs ``rec`` now: nothing before Slurm has started it."""
    assert sim.resizing is not None and rec.start is not None
    return 0.0 if now <= rec.start and rec.resize_s == 0 else sim.resizing.cost_s


def _resizable(sim: Simulation) -> list[JobRecord]:
    return [
        r
        for jid, r in sim.running.items()
        if jid not in sim.opp_ids
        and r.leaving is None
        and r.start is not None
        and r.shape is not None
        and _free_choice(r.task, sim.platform)
    ]


def _waiting_vcs(sim: Simulation) -> set[str]:
    return {r.job.vc for jid, r in sim.waiting.items() if jid not in sim.opp_ids}


def _end(rec: JobRecord) -> float:
    assert rec.start is not None
    return rec.start + rec.run_s
