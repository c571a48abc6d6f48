"""Preemption with notice and the choice of victims that lose the least work, in the cell core."""

from __future__ import annotations

from hivebatch.cells.notice import NoticeBook
from tests.unit.test_cells_allocator import lab, req


def test_running_victim_gets_a_notice_and_keeps_its_gpus() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("low", "x", 8, priority=0))
    a.notice = NoticeBook(now=1000.0, notice_s={"low": 120.0})
    d = a.allocate(req("high", "x", 2, priority=1))
    assert d.result == "waiting"
    assert d.reason == "waiting for job low to leave its GPUs, notice ends at 1970-01-01 00:18:40 UTC"
    assert a.notice.told == {"low": ("high", 1120.0)}
    # the victim still holds every GPU: nothing else can be placed on them meanwhile
    assert "low" in a.jobs() and "high" not in a.jobs()
    assert a.allocate(req("other", "x", 1, priority=0)).result == "waiting"
    a.check_invariants()


def test_the_reason_names_a_victim_as_its_owner_sees_it() -> None:
    # seen on the lab: hq listed alice's task as 1990_1 while a job waiting for it to leave said job 1992
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("1992", "x", 8, priority=0))
    a.notice = NoticeBook(now=1000.0, notice_s={"1992": 120.0}, names={"1992": "1990_1"})
    d = a.allocate(req("high", "x", 2, priority=1))
    assert d.reason == "waiting for job 1990_1 to leave its GPUs, notice ends at 1970-01-01 00:18:40 UTC"
    assert a.notice.told == {"1992": ("high", 1120.0)}


def test_a_second_round_waits_on_the_same_notice_and_tells_no_one_again() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("low", "x", 8, priority=0))
    a.notice = NoticeBook(now=1060.0, notice_s={"low": 120.0}, leaving={"low": 1120.0})
    d = a.allocate(req("high", "x", 2, priority=1))
    assert d.result == "waiting" and "notice ends at 1970-01-01 00:18:40 UTC" in (d.reason or "")
    assert a.notice.told == {}


def test_victim_that_never_started_is_taken_at_once() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("low", "x", 8, priority=0))
    a.notice = NoticeBook(now=1000.0, notice_s={})  # placed, not started: nothing to warn
    d = a.allocate(req("high", "x", 2, priority=1))
    assert d.result == "placed" and d.preempted == ["low"]


def test_try_allocate_tells_no_one() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("low", "x", 8, priority=0))
    a.notice = NoticeBook(now=1000.0, notice_s={"low": 60.0})
    assert a.try_allocate(req("high", "x", 2, priority=1)).result == "waiting"
    assert a.notice.told == {}


def test_victims_losing_the_least_work_are_chosen() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    for j in ("a", "b", "c", "d"):
        a.allocate(req(j, "x", 2, priority=0))
    # without knowing the work at stake, the first GPUs in tree order go
    assert a.try_allocate(req("high", "x", 2, priority=1)).preempted == ["a"]
    a.at_stake = {"a": 9000.0, "b": 50.0, "c": 7000.0, "d": 800.0}
    assert a.try_allocate(req("high", "x", 2, priority=1)).preempted == ["b"]
    # four GPUs stay within one socket (topology first): of the two sockets, the one losing less
    assert a.try_allocate(req("high", "x", 4, priority=1)).preempted == ["c", "d"]


def test_victims_are_compared_across_the_vcs_cells_of_every_level() -> None:
    # sys's shape in the example config: two single GPUs (a, b) and a switch pair (c, d)
    a = lab({"x": {"V100-SWITCH": 1, "V100": 2}}, nodes=1)
    for j in ("a", "b", "c", "d"):
        a.allocate(req(j, "x", 1, priority=0))
    assert a.jobs()["b"].placement == {"node1": [1]} and a.jobs()["c"].placement == {"node1": [2]}
    # c loses least although it runs in the larger cell (measured on the lab: the single GPU's job,
    # 16 times as far along, was preempted)
    a.at_stake = {"a": 900.0, "b": 800.0, "c": 50.0, "d": 700.0}
    assert a.try_allocate(req("high", "x", 1, priority=1)).preempted == ["c"]
    a.at_stake = {"a": 10.0, "b": 800.0, "c": 50.0, "d": 700.0}
    assert a.try_allocate(req("high", "x", 1, priority=1)).preempted == ["a"]
    # two GPUs together: only the switch pair has them, whatever its victims lose
    assert a.try_allocate(req("high", "x", 2, priority=1)).preempted == ["c", "d"]
    a.check_invariants()


def test_a_job_in_notice_is_the_cheapest_victim() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    for j in ("a", "b", "c", "d"):
        a.allocate(req(j, "x", 2, priority=0))
    a.at_stake = {"a": 10.0, "b": 900.0, "c": 0.0, "d": 700.0}  # c is leaving: nothing more to lose
    a.notice = NoticeBook(now=50.0, notice_s={"a": 120.0, "b": 120.0, "d": 120.0}, leaving={"c": 100.0})
    d = a.allocate(req("high", "x", 2, priority=1))
    assert d.result == "waiting" and "job c to leave" in (d.reason or "")
    assert a.notice.told == {}


def test_lower_class_goes_before_less_work() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("prior", "x", 4, priority=1))
    a.allocate(req("normal", "x", 4, priority=0))
    a.at_stake = {"prior": 1.0, "normal": 9000.0}
    assert a.try_allocate(req("urgent", "x", 4, priority=2)).preempted == ["normal"]


def test_opportunistic_victims_losing_the_least_are_chosen() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    for j in ("o1", "o2", "o3", "o4"):
        a.allocate(req(j, "x", 2, priority=-1))
    a.at_stake = {"o1": 500.0, "o2": 400.0, "o3": 10.0, "o4": 300.0}
    assert a.try_allocate(req("g", "x", 2)).preempted == ["o3"]
    assert a.try_allocate(req("g", "x", 4)).preempted == ["o3", "o4"]


def test_gpus_a_victim_left_stay_kept_for_the_waiting_job_for_the_round() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    a.allocate(req("gone", "x", 4, priority=-1))
    a.allocate(req("slow", "x", 4, priority=-1))
    a.at_stake = {"gone": 5.0, "slow": 9.0}
    a.notice = NoticeBook(now=0.0, notice_s={"gone": 60.0, "slow": 60.0})
    assert a.allocate(req("g", "x", 8)).result == "waiting"
    a.release("gone")  # it left at once (died of its signal); "slow" saves its work first
    a.notice = NoticeBook(now=1.0, notice_s={}, leaving={"gone": 60.0, "slow": 60.0})
    assert a.allocate(req("g", "x", 8)).result == "waiting"
    # the GPUs "gone" gave back are the waiting job's: no opportunistic job (not even "gone") takes them
    assert a.allocate(req("gone", "x", 4, priority=-1)).result == "waiting"
    a.check_invariants()
    a.release_notice_holds()  # next round: free again, and the waiting job is asked first
    a.release("slow")
    assert a.allocate(req("g", "x", 8)).placement == {"node1": list(range(8))}
    a.check_invariants()


def test_a_job_placed_on_another_shape_takes_back_its_notice() -> None:
    a = lab({"x": {"V100-NODE": 2}}, nodes=2)
    a.allocate(req("x0", "x", 4))  # binds node1
    assert a.allocate(req("o", "x", 4, priority=-1)).placement == {"node2": [0, 1, 2, 3]}
    a.notice = NoticeBook(now=0.0, notice_s={"o": 60.0})
    assert a.allocate(req("p", "x", 8, nodes=1)).result == "waiting"  # node2 whole: o must go
    assert a.notice.told == {"o": ("p", 60.0)}
    d = a.allocate(req("p", "x", 8, nodes=2))  # the next shape fits around it
    assert d.result == "placed" and d.preempted == []
    assert a.notice.told == {} and a.foreign() == {}
    a.check_invariants()


def test_a_multi_node_job_preempts_on_the_nodes_losing_the_least() -> None:
    a = lab({"x": {"V100-NODE": 4}}, nodes=4)
    for i in range(4):
        a.allocate(req(f"n{i}", "x", 8, priority=0))  # one per node, node1..node4
    a.at_stake = {"n0": 900.0, "n1": 50.0, "n2": 800.0, "n3": 10.0}
    d = a.allocate(req("big", "x", 16, nodes=2, priority=1))
    assert d.preempted == ["n1", "n3"] and sorted(d.placement) == ["node2", "node4"]
    a.check_invariants()
