"""Backfill reservations in the scheduling round, on the real cell core: the head of a VC that cannot
start gets a start time, and later jobs of its VC start only where they do not delay it."""

from __future__ import annotations

from hivebatch.cells import CellAllocator, Request
from hivebatch.qos import Plan, Platform, Shape, Task
from hivebatch.reservation import shadow_time
from hivebatch.scheduler import Outcome, schedule_round
from hivebatch.sim import setup

PLATFORM = Platform(max_nodes=2, gpus_per_node=8)
NOW = 1_000_000.0


class InOrder:
    """Plans the tasks in the order given, each on its own shape, running for its time limit."""

    def plan(
        self, tasks: list[Task], now: float, platform: Platform, limits: dict[str, int] | None
    ) -> list[Plan]:
        out = []
        for t in tasks:
            assert t.shape is not None and t.time_limit_s is not None
            fits = limits is None or t.shape.gpus <= limits.get(t.vc, 0)
            out.append(Plan(t, [t.shape] if fits else [], t.time_limit_s, now + 1e6, 1e6, True))
        out.sort(key=lambda p: not p.shapes)  # as the real policies do: shape-less plans last
        return out


def _alloc(nodes: int = 1) -> CellAllocator:
    return CellAllocator(setup.build_spec(setup.node8_config({"a": nodes})))


def _task(jid: str, gpus: int, limit_s: float, arrival: float = NOW - 60) -> Task:
    return Task(
        job_id=jid,
        vc="a",
        cls="normal",
        arrival=arrival,
        gpus=gpus,
        shape=Shape(1, gpus),
        time_limit_s=limit_s,
    )


def _run(
    alloc: CellAllocator, tasks: list[Task], ends: dict[str, float] | None, **kw: object
) -> dict[str, Outcome]:
    outs = schedule_round(tasks, NOW, alloc, InOrder(), PLATFORM, ends=ends, **kw)  # type: ignore[arg-type]
    return {o.job_id: o for o in outs}


def test_shadow_time_is_when_enough_running_jobs_have_ended() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1]})
    alloc.adopt("r2", "a", 0, {"n0001": [2, 3, 4, 5]})
    alloc.adopt("r3", "a", 0, {"n0001": [6]})
    ends = {"r1": NOW + 300, "r2": NOW + 200, "r3": NOW + 100}
    four = shadow_time(alloc.fork(), Request("h", "a", 4), ends, NOW)
    assert four is not None and four.start == NOW + 200  # 1 free + r3's 1 is 2; r2's 4 make 6
    eight = shadow_time(alloc.fork(), Request("h", "a", 8), ends, NOW)
    assert eight is not None and eight.start == NOW + 300 and eight.placement == {"n0001": list(range(8))}
    assert set(alloc.jobs()) == {"r1", "r2", "r3"}  # the walk ran on a copy


def test_no_shadow_when_a_needed_job_has_no_known_end() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1]})
    alloc.adopt("r2", "a", 0, {"n0001": [2]})
    assert shadow_time(alloc.fork(), Request("h", "a", 8), {"r2": NOW + 10}, NOW) is None


def test_a_late_job_counts_as_ending_now() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": list(range(8))})
    found = shadow_time(alloc.fork(), Request("h", "a", 8), {"r1": NOW - 50}, NOW)
    assert found is not None and found.start == NOW


def test_head_is_reserved_and_a_long_small_job_waits_while_a_short_one_starts() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3]})
    tasks = [_task("head", 8, 3600), _task("long", 1, 5000), _task("short", 1, 900)]
    by = _run(alloc, tasks, {"r1": NOW + 1000})
    assert by["head"].result == "waiting"
    assert by["head"].reason is not None and by["head"].reason.startswith("reserved: starts by ")
    assert "n0001[0,1,2,3,4,5,6,7]" in by["head"].reason
    assert by["head"].predicted_start == NOW + 1000 and by["head"].predicted_end == NOW + 1000 + 3600
    assert by["long"].result == "waiting" and by["long"].reason is not None
    assert by["long"].reason.startswith("would delay job head")
    assert by["short"].result == "placed"  # ends at NOW + 900, before the head's start


def test_without_ends_the_small_jobs_take_the_free_gpus() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3]})
    by = _run(alloc, [_task("head", 8, 3600), _task("long", 1, 5000)], None)
    assert by["long"].result == "placed"
    assert by["head"].result == "waiting" and not (by["head"].reason or "").startswith("reserved")


def test_a_long_job_outside_the_gpus_the_head_needs_starts() -> None:
    alloc = _alloc(nodes=2)
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3, 4, 5]})  # 2 free GPUs there, until NOW + 5000
    alloc.adopt("r2", "a", 0, {"n0002": [0, 1, 2, 3]})  # the head's node frees at NOW + 500
    tasks = [_task("head", 8, 3600), _task("pair", 2, 9000)]
    by = _run(alloc, tasks, {"r1": NOW + 5000, "r2": NOW + 500})
    assert by["head"].predicted_start == NOW + 500
    assert by["pair"].result == "placed" and by["pair"].placement == {"n0001": [6, 7]}


def test_a_job_that_would_take_the_heads_gpus_waits() -> None:
    alloc = _alloc(nodes=2)
    alloc.adopt("r1", "a", 0, {"n0001": list(range(8))})
    alloc.adopt("r2", "a", 0, {"n0002": [0, 1, 2, 3]})
    tasks = [_task("head", 8, 3600), _task("quad", 4, 9000), _task("quad2", 4, 9000)]
    by = _run(alloc, tasks, {"r1": NOW + 5000, "r2": NOW + 500})
    assert by["quad"].result == "waiting" and by["quad2"].result == "waiting"
    assert alloc.jobs().keys() == {"r1", "r2"}


def test_a_shape_less_large_task_under_limits_still_becomes_the_head() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3]})
    tasks = [_task("head", 8, 3600), _task("long", 1, 5000)]
    by = _run(alloc, tasks, {"r1": NOW + 1000}, limits={"a": 4})
    assert (by["head"].reason or "").startswith("reserved")
    assert by["long"].result == "waiting"


def test_a_starving_task_that_fits_now_starts_before_the_policys_first() -> None:
    alloc = _alloc()
    young, old = _task("young", 8, 3600), _task("old", 8, 3600, arrival=NOW - 13 * 3600)
    by = _run(alloc, [young, old], {})
    assert by["old"].result == "placed" and by["young"].result == "waiting"
    by = _run(_alloc(), [young, old], None)  # without reservations the policy's order decides
    assert by["young"].result == "placed" and by["old"].result == "waiting"


def test_a_starving_task_takes_the_reservation_from_the_policys_first() -> None:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3]})
    tasks = [_task("young", 8, 3600), _task("old", 8, 3600, arrival=NOW - 13 * 3600), _task("long", 1, 5000)]
    by = _run(alloc, tasks, {"r1": NOW + 1000})
    assert (by["old"].reason or "").startswith("reserved")
    assert by["young"].result == "waiting" and not (by["young"].reason or "").startswith("reserved")
    assert by["long"].result == "waiting"
    # not starving yet: the first in the policy's order is the head
    by = _run(_alloc_with_r1(), tasks, {"r1": NOW + 1000}, starve_after_s=14 * 3600)
    assert (by["young"].reason or "").startswith("reserved") and by["long"].result == "waiting"


def _alloc_with_r1() -> CellAllocator:
    alloc = _alloc()
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3]})
    return alloc


def test_opportunistic_tasks_neither_hold_nor_obey_a_reservation() -> None:
    alloc = CellAllocator(setup.build_spec(setup.node8_config({"a": 1, "b": 1})))  # b's node is idle
    alloc.adopt("r1", "a", 0, {"n0001": [0, 1, 2, 3]})
    tasks = [_task("head", 8, 3600), _task("opp", 1, 9000)]
    by = _run(alloc, tasks, {"r1": NOW + 1000}, opportunistic_task_ids={"opp"})
    assert (by["head"].reason or "").startswith("reserved")
    assert by["opp"].result == "placed"  # the head preempts it when it starts


def test_a_task_the_policy_ranks_before_the_head_is_held_to_its_reservation_too() -> None:
    alloc = _alloc_with_r1()  # 4 of the 8 GPUs busy until NOW + 1000
    tasks = [_task("first", 1, 5000), _task("head", 8, 3600), _task("short", 1, 600)]
    by = _run(alloc, tasks, {"r1": NOW + 1000})
    assert by["head"].predicted_start == NOW + 1000
    assert by["first"].result == "waiting" and (by["first"].reason or "").startswith("would delay job head")
    assert by["short"].result == "placed"


def test_the_quota_pool_of_the_simulator_reserves_the_same_way() -> None:
    from hivebatch.sim.quota import QuotaPool

    spec = setup.build_spec(setup.node8_config({"a": 1}))
    pool = QuotaPool(spec.nodes, {"a": 8})
    assert pool.allocate(Request("r1", "a", 4, nodes=1)).result == "placed"
    by = {o.job_id: o for o in schedule_round(
        [_task("head", 8, 3600), _task("long", 1, 5000), _task("short", 1, 600)],
        NOW, pool, InOrder(), PLATFORM, ends={"r1": NOW + 1000},  # type: ignore[arg-type]
    )}  # fmt: skip
    assert by["head"].predicted_start == NOW + 1000
    assert by["long"].result == "waiting" and by["short"].result == "placed"
    assert set(pool.jobs()) == {"r1", "short"}


def test_the_head_is_asked_of_the_cells_as_the_cycle_found_them() -> None:
    # The controller resumes a requeued job before the round. On the cells as the cycle found them the
    # 8-GPU job fits, so it is no head this round, and the one-GPU job ranked before it starts; asked
    # after the resume, it would be the head, and its reservation would hold the one-GPU job back.
    found = _alloc()
    resumed = found.fork()
    assert resumed.adopt("victim", "a", 0, {"n0001": [6]}).result == "placed"
    tasks = [_task("small", 1, 5000), _task("big", 8, 3600, arrival=NOW - 600)]
    ends = {"victim": NOW + 100}
    asked_after = _run(resumed.fork(), tasks, ends)
    assert (asked_after["big"].reason or "").startswith("reserved: starts by ")
    assert asked_after["small"].result == "waiting" and asked_after["small"].reason == (
        "would delay job big, which holds its VC's reservation"
    )
    by = _run(resumed, tasks, ends, found=found)
    assert by["small"].result == "placed" and by["small"].placement == {"n0001": [0]}
    assert by["big"].result == "waiting" and not (by["big"].reason or "").startswith("reserved")
    assert set(found.jobs()) == set()  # only asked
