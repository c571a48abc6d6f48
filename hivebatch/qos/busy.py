"""Makespan guards of the ``qos`` policy: no straggler on a narrow placement, no long run left to the
end of the queue, no GPU left idle.

All need the VC's free GPUs (``limits``); without them the policy's choice is left as it is.

* **Stragglers.** With limits, the CER-max choice only sees the GPUs free now, so a task arriving
  while one GPU is free takes that GPU even when its run there is many times longer than on its
  best placement. Near the end of a burst such a run outlives every other job and sets the
  makespan. A task therefore keeps only shapes at most ``STRETCH`` times slower than its CER-max
  shape on the whole VC, or no longer than the backlog (the waiting work on its least-GPU-time
  shapes spread over all GPUs): under a long queue every GPU stays busy anyway and narrow shapes
  waste least; with a short one the task waits for a wider placement instead.
* **The drain's tail.** Among the tasks past saving (each has lost its ECT whatever its turn), one
  whose run is longer than the backlog goes first, longest first: started at its turn in arrival
  order, it would run on alone after the queue has drained.
* **Idle GPUs.** When the waiting tasks cannot use all free GPUs, the tasks starting now take the
  rest, longest run first, on faster shapes that still meet their ECT. One node's worth of GPUs is
  kept free for arrivals: a task with a tight ECT that finds everything taken misses it. How many is
  the trade-off between makespan and QoS rate, so a site sets it (``qos.keep_free_gpus``) after
  comparing on its own history.

Measured on the paper workload (bench/bench_sim.py makespan, docs/simulate.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from hivebatch.qos.perfmodel import Shape
from hivebatch.qos.placement import (
    Choice,
    Platform,
    Task,
    _free_choice,
    choose_qos,
    shape_table,
    task_latency,
    user_shapes,
)

if TYPE_CHECKING:
    from hivebatch.qos.policies import Plan

# A task's shapes may be at most this many times slower than its CER-max shape on the whole VC.
# Tuned on the paper workload, seeds 1-3 (2 and 3 leave stragglers at 20 jobs/h; 4 and above
# change nothing there), checked on seeds 4-6.
STRETCH = 2.5


def least_gpu_seconds(task: Task, platform: Platform) -> float:
    """The task's work on its most GPU-efficient placement (GPUs x run time)."""
    if _free_choice(task, platform):
        table = shape_table(task, platform, None)
        return min((s.gpus * float(lat) for s, lat in zip(table.shapes, table.latency, strict=True)),
                   default=0.0)  # fmt: skip
    return min((s.gpus * task_latency(task, s, platform) for s in user_shapes(task, platform)), default=0.0)


def backlog_s(tasks: Iterable[Task], platform: Platform) -> float:
    """How long all GPUs would take to run the waiting tasks on their least-GPU-time shapes."""
    gpus = platform.max_nodes * platform.gpus_per_node
    return sum(least_gpu_seconds(t, platform) for t in tasks) / gpus


def without_stragglers(
    choice: Choice, task: Task, now: float, platform: Platform, backlog: Callable[[], float]
) -> Choice:
    """``choice`` keeping only the shapes no slower than STRETCH x the whole-VC choice or the backlog
    (asked for only when a shape is slower than the former: it walks the whole queue).

    No shape left: the task waits for more GPUs (the plan's reason says so).
    """
    if not choice.shapes or not _free_choice(task, platform):
        return choice
    best = choose_qos(task, now, platform, None)
    table = shape_table(task, platform, None)
    lat = {s: float(x) for s, x in zip(table.shapes, table.latency, strict=True)}
    stretch = STRETCH * best.latency_s
    if all(lat.get(s, math.inf) <= stretch for s in choice.shapes):
        return choice
    bound = max(backlog(), stretch)
    keep = [s for s in choice.shapes if lat.get(s, math.inf) <= bound]
    if keep == choice.shapes:
        return choice
    if not keep:
        reason = (
            f"waits for more GPUs: the free ones would run it over {STRETCH:g}x slower than {best.shapes[0]}"
        )
        return Choice([], math.inf, choice.ect, best.slack, best.meets_qos, reason)
    first = lat[keep[0]]
    end = now + first
    return Choice(keep, first, choice.ect, choice.ect - end, end <= choice.ect)


def outlasting_first(plans: Sequence[Plan], platform: Platform, backlog: Callable[[], float]) -> list[Plan]:
    """``plans`` (in the policy's order) with the tasks past saving whose run outlasts the backlog put
    first among the tasks past saving, longest run first; the others keep their order.

    Such a task ends after the queue has drained unless it starts now; in arrival order it starts
    near the end of the queue and its run becomes the makespan's tail. Only tasks whose count the
    policy chooses are moved: their run is the model's, where a fixed task's is its time limit.
    """
    block = [i for i, p in enumerate(plans) if p.shapes and p.past_saving]
    if not any(_free_choice(plans[i].task, platform) for i in block):
        return list(plans)
    bound = backlog()

    def key(i: int) -> tuple[int, float]:
        p = plans[i]
        if _free_choice(p.task, platform) and p.predicted_latency_s > bound:
            return (0, -p.predicted_latency_s)
        return (1, 0.0)

    out = list(plans)
    for slot, i in zip(block, sorted(block, key=key), strict=True):
        out[slot] = plans[i]
    return out


def _starting(plans: Sequence[Plan], free: dict[str, int]) -> list[int]:
    """Indices of the plans whose first shape fits the GPUs left, counting GPUs in the policy's order
    as the allocator goes; ``free`` is reduced by what they and plans on a fallback shape take."""
    out = []
    for i, p in enumerate(plans):
        vc = p.task.vc
        if vc not in free:
            continue
        fit = next((s for s in p.shapes if s.gpus <= free[vc]), None)
        if fit is None:
            continue
        free[vc] -= fit.gpus
        if fit == p.shapes[0]:
            out.append(i)
    return out


def fill_idle_gpus(
    plans: Sequence[Plan], now: float, platform: Platform, limits: dict[str, int]
) -> list[Plan]:
    """``plans`` with tasks that start now widened into GPUs no waiting task would use this round."""
    out = list(plans)
    free = dict(limits)
    starts = _starting(out, free)
    spare = {vc: n - platform.kept_free for vc, n in free.items()}
    for i in sorted(starts, key=lambda k: -out[k].predicted_latency_s):
        p = out[i]
        vc = p.task.vc
        if spare[vc] <= 0 or not _free_choice(p.task, platform):
            continue
        wider = _faster_shape(p, now, platform, limits[vc], p.shapes[0].gpus + spare[vc])
        if wider is None:
            continue
        shape, lat = wider
        spare[vc] -= shape.gpus - p.shapes[0].gpus
        end = now + lat
        out[i] = replace(
            p,
            shapes=[shape, *(s for s in p.shapes if s != shape)],
            predicted_latency_s=lat,
            slack=p.expected_completion - end,
            meets_qos=end <= p.expected_completion,
        )
    return out


def _faster_shape(
    p: Plan, now: float, platform: Platform, limit: int, gpus: int
) -> tuple[Shape, float] | None:
    """The fastest shape of at most ``gpus`` GPUs that beats the plan's first shape and, if that meets
    the ECT, meets it too (fewer GPUs on a tie)."""
    table = shape_table(p.task, platform, limit)
    best: tuple[float, int, Shape] | None = None
    for s, x in zip(table.shapes, table.latency, strict=True):
        lat = float(x)
        if s.gpus > gpus or lat >= p.predicted_latency_s:
            continue
        if p.meets_qos and now + lat > p.expected_completion:
            continue
        if best is None or (lat, s.gpus) < best[:2]:
            best = (lat, s.gpus, s)
    return None if best is None else (best[2], best[0])
