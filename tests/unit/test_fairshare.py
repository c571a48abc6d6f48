"""Per-user fairshare: the decay of recent GPU-hours and the re-order inside a (VC, class) group."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hivebatch.cells import CellAllocator
from hivebatch.fairshare import Run, by_nice, decay, decayed_gpu_hours, reorder, usage_by_user
from hivebatch.qos import Plan, Platform, Shape, Task
from hivebatch.scheduler import schedule_round
from hivebatch.sim import setup

DAY = 86400.0
WEEK = 7 * DAY


def test_decay_halves_each_half_life() -> None:
    assert decay(0.0, WEEK) == 1.0
    assert decay(WEEK, WEEK) == pytest.approx(0.5)
    assert decay(3 * WEEK, WEEK) == pytest.approx(0.125)
    assert decay(-5.0, WEEK) == 1.0  # a clock a little behind counts as now


def test_decayed_gpu_hours_is_the_integral_of_the_decayed_rate() -> None:
    now = 100 * DAY
    fresh = Run("u", 4, now - 3600, now)
    # one hour ending now, half-life a week: almost undecayed
    assert decayed_gpu_hours(fresh, now, WEEK) == pytest.approx(4.0, rel=5e-3)
    assert decayed_gpu_hours(fresh, now, WEEK) < 4.0
    old = Run("u", 4, now - WEEK - 3600, now - WEEK)
    assert decayed_gpu_hours(old, now, WEEK) == pytest.approx(decayed_gpu_hours(fresh, now, WEEK) / 2)
    # a long run, checked against a numeric sum of its minutes
    long_run = Run("u", 2, now - 20 * DAY, now - 2 * DAY)
    steps = int(18 * DAY / 60)
    numeric = sum(2 * decay(now - (long_run.start + (i + 0.5) * 60), WEEK) * 60 for i in range(steps)) / 3600
    assert decayed_gpu_hours(long_run, now, WEEK) == pytest.approx(numeric, rel=1e-6)
    # the part after now is not counted; an empty run counts nothing
    assert decayed_gpu_hours(Run("u", 1, now - 3600, now + 3600), now, WEEK) == pytest.approx(
        decayed_gpu_hours(Run("u", 1, now - 3600, now), now, WEEK)
    )
    assert decayed_gpu_hours(Run("u", 1, now, now), now, WEEK) == 0.0


def test_usage_adds_up_per_user() -> None:
    now = 10 * DAY
    runs = [
        Run("ann", 1, now - 7200, now - 3600),
        Run("ann", 1, now - 3600, now),
        Run("bob", 8, now - 60, now),
    ]
    use = usage_by_user(runs, now, WEEK)
    assert use["ann"] == pytest.approx(decayed_gpu_hours(Run("ann", 1, now - 7200, now), now, WEEK))
    assert use["bob"] == pytest.approx(8 / 60, rel=1e-4)


def test_reorder_moves_items_only_inside_their_groups_slots() -> None:
    items = [("cv", "heavy1"), ("nlp", "heavy"), ("cv", "heavy2"), (None, "light"), ("cv", "light")]
    usage = {"heavy1": 50.0, "heavy2": 50.0, "heavy": 50.0, "light": 1.0}
    out = reorder(items, lambda it: it[0], lambda it: it[1], usage)
    # the cv group holds slots 0, 2, 4: light first, then the two heavy ones in their old order
    assert out == [("cv", "light"), ("nlp", "heavy"), ("cv", "heavy1"), (None, "light"), ("cv", "heavy2")]


class ByArrival:
    def plan(
        self, tasks: list[Task], now: float, platform: Platform, limits: dict[str, int] | None
    ) -> list[Plan]:
        return [
            Plan(t, [Shape(1, 1)], 60.0, now + 1e6, 1e6, True) for t in sorted(tasks, key=lambda t: t.arrival)
        ]


def _task(jid: str, user: str, cls: str, arrival: float, vc: str = "a", nice: int = 0) -> Task:
    return Task(
        job_id=jid, vc=vc, cls=cls, arrival=arrival, gpus=1, shape=Shape(1, 1), time_limit_s=60.0, user=user,
        nice=nice,
    )  # fmt: skip


def test_fairshare_reorders_within_vc_and_class_only() -> None:
    alloc = CellAllocator(setup.build_spec(setup.node8_config({"a": 1, "b": 1})))
    tasks = [
        _task("h1", "heavy", "normal", 1),
        _task("h2", "heavy", "prior", 2),
        _task("b1", "heavy", "normal", 3, vc="b"),
        _task("l1", "light", "normal", 4),
        _task("l2", "light", "prior", 5),
        _task("b2", "light", "normal", 6, vc="b"),
    ]
    usage = {"heavy": 100.0, "light": 1.0}
    outs = schedule_round(tasks, 0.0, alloc, ByArrival(), Platform(2, 8), usage=usage)  # type: ignore[arg-type]
    order = [o.job_id for o in outs]
    # slots of (a, normal) = 0, 3; (a, prior) = 1, 4; (b, normal) = 2, 5: each group's light user first
    assert order == ["l1", "l2", "b2", "h1", "h2", "b1"]
    plain = schedule_round(tasks, 0.0, CellAllocator(alloc.spec), ByArrival(), Platform(2, 8))  # type: ignore[arg-type]
    assert [o.job_id for o in plain] == ["h1", "h2", "b1", "l1", "l2", "b2"]


def test_by_nice_orders_each_users_jobs_by_nice_and_puts_positive_ones_last_in_their_group() -> None:
    # (group, user, nice, name)
    items = [("a", "u", 100, "u1"), ("a", "v", 0, "v1"), ("b", "u", 0, "b1"), ("a", "u", 0, "u2"),
             ("a", "v", -5, "v2"), ("a", "w", 10, "w1"), (None, "u", 50, "free")]  # fmt: skip
    out = by_nice(items, lambda it: it[0], lambda it: it[1], lambda it: it[2])
    # group a holds slots 0, 1, 3, 4, 5: u's own two swap (u2 before u1), v's too (v2 at -5 first);
    # then the positive ones (u1, w1) go after all others, in that order
    assert [it[3] for it in out] == ["u2", "v2", "b1", "v1", "u1", "w1", "free"]
    same = [("a", "u", 0, "x"), ("a", "v", 0, "y")]
    assert by_nice(same, lambda it: it[0], lambda it: it[1], lambda it: it[2]) == same


class WholeNodes(ByArrival):
    def plan(
        self, tasks: list[Task], now: float, platform: Platform, limits: dict[str, int] | None
    ) -> list[Plan]:
        return [replace(p, shapes=[Shape(1, 8)]) for p in super().plan(tasks, now, platform, limits)]


def test_a_niced_job_lets_the_vcs_other_job_of_its_class_take_the_free_gpus() -> None:
    # plain Slurm started the later job of the two first (tests/fixtures/slurm/nice_order.txt)
    alloc = CellAllocator(setup.build_spec(setup.node8_config({"a": 1})))
    tasks = [
        Task(job_id="niced", vc="a", cls="normal", arrival=1, gpus=8, shape=Shape(1, 8), time_limit_s=60.0,
             user="bob", nice=100),
        Task(job_id="later", vc="a", cls="normal", arrival=2, gpus=8, shape=Shape(1, 8), time_limit_s=60.0,
             user="bob"),
    ]  # fmt: skip
    outs = {o.job_id: o for o in schedule_round(tasks, 0.0, alloc, WholeNodes(), Platform(1, 8))}  # type: ignore[arg-type]
    assert outs["later"].result == "placed" and outs["niced"].result != "placed"
    plain = [replace(t, nice=0) for t in tasks]
    outs = {
        o.job_id: o
        for o in schedule_round(plain, 0.0, CellAllocator(alloc.spec), WholeNodes(), Platform(1, 8))
    }  # type: ignore[arg-type]
    assert outs["niced"].result == "placed" and outs["later"].result != "placed"
