"""The qos policy's makespan guards (hivebatch.qos.busy) on queues worked out by hand.

Toy profile, batch 256, 1000 iterations, on 4 nodes x 4 GPUs (no start-up overhead):
  1x4 740 s (CER-max), 2x4 620 s (fastest), 3x4 630 s, 1x1 2560 s (least GPU time).
"""

from __future__ import annotations

import pytest
from qos_helpers import toy_profile

from hivebatch.config import read_yaml
from hivebatch.qos import Platform, Shape, Task, get_policy
from hivebatch.qos.busy import STRETCH, backlog_s
from hivebatch.sim import setup
from hivebatch.sim.engine import JobRecord, Simulation
from hivebatch.sim.workload import SimJob

P44 = Platform(max_nodes=4, gpus_per_node=4, theta=0.5, overhead_s=0.0)
PROFILE = toy_profile()


def _task(jid: str, cls: str = "normal", arrival: float = 0.0) -> Task:
    return Task(jid, "cv", cls, arrival, model=PROFILE, batch=256, iters=1000)


def _first_shapes(policy: str, tasks: list[Task], free: int | None) -> dict[str, Shape | None]:
    limits = None if free is None else {"cv": free}
    plans = get_policy(policy).plan(tasks, 0.0, P44, limits)
    return {p.task.job_id: (p.shapes[0] if p.shapes else None) for p in plans}


def test_a_lone_task_takes_idle_gpus_but_leaves_a_node_free() -> None:
    # The paper's choice (1x4) would leave 12 of 16 GPUs idle; the fastest shape that leaves one
    # node free for arrivals is 2x4 (620 s; 3x4 is slower on this profile).
    assert _first_shapes("qos-paper", [_task("a")], 16) == {"a": Shape(1, 4)}
    plan = get_policy("qos").plan([_task("a")], 0.0, P44, {"cv": 16})[0]
    assert plan.shapes[0] == Shape(2, 4)
    assert plan.predicted_latency_s == pytest.approx(620.0)
    assert Shape(1, 4) in plan.shapes[1:]  # the CER-max shape stays as a fallback
    assert plan.meets_qos and plan.slack == pytest.approx(2 * 2560 - 620)


def test_no_widening_when_the_queue_uses_every_free_gpu() -> None:
    tasks = [_task(f"t{i}", arrival=i) for i in range(4)]
    shapes = _first_shapes("qos", tasks, 8)
    assert sorted(str(s) for s in shapes.values()) == ["1x4"] * 4


def test_no_widening_into_the_node_kept_for_arrivals() -> None:
    # 8 GPUs free: 1x4 leaves exactly one node, so nothing is widened
    assert _first_shapes("qos", [_task("a")], 8) == {"a": Shape(1, 4)}


@pytest.mark.parametrize(
    ("keep", "free", "shape"),
    [
        (0, 16, Shape(2, 4)),  # nothing kept: the fastest shape on the whole cluster
        (0, 8, Shape(2, 4)),  # the node the default keeps for arrivals goes to the lone task
        (8, 16, Shape(2, 4)),  # two nodes kept: 1x4 starts, 4 more GPUs to widen into
        (8, 12, Shape(1, 4)),  # two nodes kept of three free: nothing to widen into
        (6, 12, Shape(2, 3)),  # 2 GPUs to spare: the fastest shape of at most 6 GPUs
    ],
)
def test_the_gpus_kept_free_for_arrivals_are_the_sites_choice(keep: int, free: int, shape: Shape) -> None:
    platform = Platform(max_nodes=4, gpus_per_node=4, theta=0.5, overhead_s=0.0, keep_free_gpus=keep)
    plan = get_policy("qos").plan([_task("a")], 0.0, platform, {"cv": free})[0]
    assert plan.shapes[0] == shape


def _lone_job(policy: str, **qos: object) -> JobRecord:
    """One resnet50 job alone on the paper's cluster (one VC), with ``qos`` set in the config."""
    data = setup.single_vc_config(read_yaml(setup.paper_config_path()))
    data["qos"].update(qos)
    spec = setup.build_spec(data)
    settings = setup.qos_settings(data, setup.paper_config_path().parent)
    platform = setup.build_platform(spec, settings)
    runtime = setup.build_runtime(spec, platform, settings)
    jobs = [SimJob("m", "all", "normal", 0.0, 1, model="resnet50", batch=256, iters=2000)]
    return Simulation(spec, jobs, policy, "cells", runtime, platform).run().records[0]


def test_keep_free_gpus_reaches_the_simulator_from_the_config() -> None:
    rec = _lone_job("qos", keep_free_gpus=0)
    assert rec.shape is not None and rec.shape.gpus == 16  # no node left for arrivals: all four


def test_a_task_waits_rather_than_straggle_on_one_gpu() -> None:
    # Only one GPU is free: 1x1 takes 2560 s, more than STRETCH x 740 s; the queue is short, so
    # the task waits for a wider placement instead of outliving everything else.
    assert STRETCH * 740 < 2560
    assert _first_shapes("qos-paper", [_task("a")], 1) == {"a": Shape(1, 1)}
    plan = get_policy("qos").plan([_task("a")], 0.0, P44, {"cv": 1})[0]
    assert plan.shapes == []
    assert plan.reason is not None and "waits for more GPUs" in plan.reason


def test_under_a_long_queue_the_narrow_shape_is_kept() -> None:
    # 20 waiting tasks: the backlog (20 x 2560 GPU-s over 16 GPUs = 3200 s) outlasts the 1x1 run,
    # so all GPUs stay busy anyway and the least wasteful shape is right.
    tasks = [_task(f"t{i}", arrival=i) for i in range(20)]
    assert backlog_s(tasks, P44) == 20 * 2560 / 16
    assert set(_first_shapes("qos", tasks, 1).values()) == {Shape(1, 1)}


def test_without_limits_the_choice_is_the_papers() -> None:
    # The controller plans without the VCs' free GPUs: the guards stay out of its way.
    tasks = [_task("a"), _task("b", "prior", 5)]
    assert _first_shapes("qos", tasks, None) == _first_shapes("qos-paper", tasks, None)


def test_simulated_lone_job_uses_idle_gpus_and_ends_sooner() -> None:
    old, new = _lone_job("qos-paper"), _lone_job("qos")
    assert old.shape == Shape(1, 4)  # 12 of the 16 GPUs idle while it runs
    assert new.shape is not None and new.shape.gpus == 12  # 3 nodes; one node left for arrivals
    assert new.end is not None and old.end is not None and new.end < old.end
    assert new.met_qos and old.met_qos


# Past saving: arrived at 0, now long after its ECT (normal class: 2 x its least-GPU-time run).
LATE = 100_000.0


def _order(tasks: list[Task], free: int | None = 16) -> list[str]:
    limits = None if free is None else {"cv": free}
    return [p.task.job_id for p in get_policy("qos").plan(tasks, LATE, P44, limits)]


def _past_saving(jid: str, arrival: float, iters: int = 1000) -> Task:
    return Task(jid, "cv", "normal", arrival, model=PROFILE, batch=256, iters=iters)


def test_a_long_run_past_saving_goes_before_the_short_ones_when_it_outlasts_the_queue() -> None:
    # backlog: (2 x 2560 + 51200 GPU-s) / 16 GPUs = 3520 s; the long task runs 14800 s on 1x4
    tasks = [_past_saving("short1", 0.0), _past_saving("short2", 1.0), _past_saving("long", 2.0, 20_000)]
    assert _order(tasks) == ["long", "short1", "short2"]
    # without the VCs' free GPUs the policy's order is left as it is: arrival order
    assert _order(tasks, free=None) == ["short1", "short2", "long"]


def test_a_long_run_past_saving_keeps_its_turn_while_the_queue_outlasts_it() -> None:
    # five earlier long tasks: the backlog, 19360 s, is longer than any one run
    fillers = [_past_saving(f"f{i}", float(i), 20_000) for i in range(5)]
    tasks = [*fillers, _past_saving("short", 10.0), _past_saving("long", 11.0, 20_000)]
    assert _order(tasks) == ["f0", "f1", "f2", "f3", "f4", "short", "long"]


def test_a_task_that_can_still_meet_its_ect_is_not_passed_by_a_long_one_past_saving() -> None:
    fresh = Task("fresh", "cv", "normal", LATE, model=PROFILE, batch=256, iters=1000)
    tasks = [_past_saving("long", 0.0, 20_000), fresh]
    assert _order(tasks) == ["fresh", "long"]


def test_a_fixed_task_past_saving_is_not_moved_by_its_time_limit() -> None:
    # a plain job's run is its time limit: moving it first would reward the longest limits
    plain = Task("plain", "cv", "normal", 2.0, gpus=4, shape=Shape(1, 4), time_limit_s=20_000.0)
    tasks = [_past_saving("short1", 0.0), _past_saving("short2", 1.0), plain]
    assert _order(tasks) == ["short1", "short2", "plain"]
