"""The scheduling glue shared by the controller and the simulator."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hivebatch.cells import Decision, Request
from hivebatch.qos import Plan, Platform, Shape, Task
from hivebatch.scheduler import schedule_round

PLATFORM = Platform(max_nodes=4, gpus_per_node=4)


@dataclass
class ScriptedAllocator:
    """Places a request only if its (gpus, nodes) is in ``fits``; remembers every request."""

    fits: set[tuple[int, int]]
    reject: set[tuple[int, int]] = field(default_factory=set)
    preempts: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    def allocate(self, req: Request) -> Decision:
        self.requests.append(req)
        key = (req.gpus, req.nodes or 1)
        if key in self.reject:
            return Decision("rejected", error=f"{req.gpus} GPUs never fit")
        if key in self.fits:
            return Decision(
                "placed", placement={"node1": list(range(req.gpus))}, preempted=list(self.preempts)
            )
        return Decision("waiting", reason=f"no free cell for {req.gpus} GPUs")


@dataclass
class FixedPolicy:
    """Returns the plans it was given, in that order (the order the real policies decide)."""

    shapes: dict[str, list[Shape]]
    strict_order: bool = False
    drop: set[str] = field(default_factory=set)

    def plan(
        self, tasks: list[Task], now: float, platform: Platform, limits: dict[str, int] | None
    ) -> list[Plan]:
        return [
            Plan(t, self.shapes[t.job_id], 100.0, now + 500.0, 400.0, True)
            for t in tasks
            if t.job_id not in self.drop
        ]


def _task(jid: str, vc: str = "cv", arrival: float = 0.0) -> Task:
    return Task(job_id=jid, vc=vc, cls="normal", arrival=arrival, gpus=1, time_limit_s=100.0)


def test_first_shape_that_fits_wins() -> None:
    alloc = ScriptedAllocator(fits={(4, 2)})
    policy = FixedPolicy({"a": [Shape(1, 4), Shape(2, 2), Shape(1, 2)]})
    [o] = schedule_round([_task("a")], 10.0, alloc, policy, PLATFORM)
    assert o.result == "placed" and o.shape == Shape(2, 2)
    assert [(r.gpus, r.nodes) for r in alloc.requests] == [(4, 1), (4, 2)]
    assert o.predicted_start == 10.0 and o.predicted_end == 10.0 + 100.0  # plain job: its time limit
    assert o.placement == {"node1": [0, 1, 2, 3]}


def test_waiting_carries_the_cell_core_reason_and_rejected_the_error() -> None:
    alloc = ScriptedAllocator(fits=set(), reject={(8, 2)})
    policy = FixedPolicy({"w": [Shape(1, 4)], "r": [Shape(2, 4)]})
    by_id = {o.job_id: o for o in schedule_round([_task("w"), _task("r")], 0.0, alloc, policy, PLATFORM)}
    assert by_id["w"].result == "waiting" and by_id["w"].reason == "no free cell for 4 GPUs"
    assert by_id["r"].result == "rejected" and by_id["r"].reason == "8 GPUs never fit"


def test_strict_order_blocks_only_the_same_vc() -> None:
    alloc = ScriptedAllocator(fits={(1, 1)})
    shapes = {"a": [Shape(1, 4)], "b": [Shape(1, 1)], "c": [Shape(1, 1)]}
    tasks = [_task("a", "cv"), _task("b", "cv", 1.0), _task("c", "nlp", 2.0)]
    by_id = {
        o.job_id: o
        for o in schedule_round(tasks, 0.0, alloc, FixedPolicy(shapes, strict_order=True), PLATFORM)
    }
    assert by_id["b"].result == "waiting" and by_id["b"].reason == "behind job a in arrival order"
    assert by_id["c"].result == "placed"
    # the head named as its owner sees it, an array's task as 8_0
    tasks[0] = dataclasses.replace(tasks[0], shown="8_0")
    by_id = {o.job_id: o for o in schedule_round(tasks, 0.0, ScriptedAllocator(fits={(1, 1)}),
                                                 FixedPolicy(shapes, strict_order=True), PLATFORM)}  # fmt: skip
    assert by_id["b"].reason == "behind job 8_0 in arrival order"
    # without strict order the small job backfills
    alloc2 = ScriptedAllocator(fits={(1, 1)})
    by_id = {o.job_id: o for o in schedule_round(tasks, 0.0, alloc2, FixedPolicy(shapes), PLATFORM)}
    assert by_id["b"].result == "placed"


def test_guaranteed_tasks_are_placed_before_opportunistic_ones() -> None:
    alloc = ScriptedAllocator(fits={(1, 1)})
    shapes = {"opp": [Shape(1, 1)], "g": [Shape(1, 1)]}
    outs = schedule_round([_task("opp"), _task("g")], 0.0, alloc, FixedPolicy(shapes), PLATFORM, {"opp"})
    assert [(r.job_id, r.priority) for r in alloc.requests] == [("g", 0), ("opp", -1)]
    assert [o.job_id for o in outs] == ["g", "opp"]


def test_preemptions_and_dropped_tasks_are_reported() -> None:
    alloc = ScriptedAllocator(fits={(1, 1)}, preempts=["victim"])
    policy = FixedPolicy({"a": [Shape(1, 1)], "b": []}, drop={"c"})
    by_id = {
        o.job_id: o
        for o in schedule_round([_task("a"), _task("b"), _task("c")], 0.0, alloc, policy, PLATFORM)
    }
    assert by_id["a"].preempted == ["victim"]
    assert by_id["b"].result == "waiting" and "fewer are free now" in (by_id["b"].reason or "")
    assert by_id["c"].result == "waiting"


def test_custom_priorities_reach_the_allocator() -> None:
    alloc = ScriptedAllocator(fits={(1, 1)})
    schedule_round(
        [_task("a")], 0.0, alloc, FixedPolicy({"a": [Shape(1, 1)]}), PLATFORM, priority_of=lambda t: 7
    )
    assert alloc.requests[0].priority == 7


def test_empty_round() -> None:
    assert schedule_round([], 0.0, ScriptedAllocator(fits=set()), FixedPolicy({}), PLATFORM) == []
