"""The simulator on tiny, hand-checkable traces: every policy, both sharing modes, preemption, bad nodes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.qos import QosSettings
from hivebatch.sim.engine import BadNode, JobRecord, SimRun, Simulation
from hivebatch.sim.metrics import summarize
from hivebatch.sim.notice import SimNotice
from hivebatch.sim.runner import Experiment, run_all
from hivebatch.sim.setup import build_platform, build_runtime, build_spec
from hivebatch.sim.workload import SimJob

# 2 nodes x 4 GPUs (2 boards of 2); VC a owns one node, VC b the other.
TWO_NODES = {
    "cluster": {
        "cell_types": {
            "G": {},
            "G-BOARD": {"child": "G", "count": 2},
            "G-NODE": {"child": "G-BOARD", "count": 2, "node": True},
        },
        "physical_cells": [{"type": "G-NODE", "nodes": ["n1"]}, {"type": "G-NODE", "nodes": ["n2"]}],
    },
    "virtual_clusters": {"a": {"cells": {"G-NODE": 1}}, "b": {"cells": {"G-NODE": 1}}},
}


def _job(
    jid: str, vc: str, t: float, gpus: int, dur: float, cls: str = "normal", opp: bool = False
) -> SimJob:
    return SimJob(
        job_id=jid, vc=vc, cls=cls, arrival=t, gpus=gpus, duration_s=dur, opportunistic=opp, model="resnet50"
    )


def _sim(
    jobs: list[SimJob], policy: str = "fifo", mode: str = "cells", **kw: object
) -> tuple[SimRun, dict[str, JobRecord]]:
    spec = build_spec(TWO_NODES)
    qos = QosSettings()
    platform = build_platform(spec, qos)
    runtime = build_runtime(spec, platform, qos)
    run = Simulation(spec, jobs, policy, mode, runtime, platform, **kw).run()  # type: ignore[arg-type]
    return run, {r.job.job_id: r for r in run.records}


def test_one_vc_queue_by_hand() -> None:
    jobs = [_job("j1", "a", 0, 4, 100), _job("j2", "a", 10, 2, 50), _job("j3", "b", 0, 1, 30)]
    run, rec = _sim(jobs)
    assert (rec["j1"].start, rec["j1"].end) == (0, 100)
    assert (rec["j2"].start, rec["j2"].end) == (100, 150)  # waits for a's only node
    assert (rec["j3"].start, rec["j3"].end) == (0, 30)  # b's node is b's own
    s = summarize(run)
    assert s.makespan_s == 150 and s.avg_queue_s == pytest.approx(90 / 3)
    assert s.vcs["a"]["avg_queue_s"] == 45 and s.vcs["b"]["avg_queue_s"] == 0
    assert s.utilization == pytest.approx((400 + 100 + 30) / (8 * 150))


# After j1 ends at 100, X (arrived 10, normal, 100 s) and Y (arrived 20, urgent, 10 s) both want
# a's whole node. e_X = 10 + 2*100 = 210, e_Y = 20 + 0*10 = 20.
#  fifo, capacity, tetris-*: arrival order  -> X first
#  minmin (earliest ECT), wfs (a + (e-a)/2), qos-paper (least slack: Y -90 < X 10) -> Y first
#  qos: Y is urgent (ECT = arrival), and urgent tasks go first -> Y first
@pytest.mark.parametrize(
    ("policy", "first"),
    [
        ("fifo", "X"),
        ("capacity", "X"),
        ("tetris-perf", "X"),
        ("tetris-cer", "X"),
        ("minmin", "Y"),
        ("wfs", "Y"),
        ("qos", "Y"),
        ("qos-paper", "Y"),
    ],
)
@pytest.mark.parametrize("mode", ["cells", "quota"])
def test_queue_order_per_policy(policy: str, first: str, mode: str) -> None:
    jobs = [
        _job("j1", "a", 0, 4, 100),
        _job("X", "a", 10, 4, 100, "normal"),
        _job("Y", "a", 20, 4, 10, "urgent"),
    ]
    run, rec = _sim(jobs, policy, mode)
    second = "Y" if first == "X" else "X"
    assert rec[first].start == 100
    assert rec[second].start == rec[first].end
    assert rec["X"].met_qos == (rec["X"].end is not None and rec["X"].end <= 210)
    assert not rec["Y"].met_qos  # urgent: e = arrival, nothing meets it
    assert summarize(run).makespan_s == 210


def test_quota_mode_job_waits_for_a_whole_node_though_its_quota_is_free() -> None:
    jobs = [
        _job("b1", "b", 0, 2, 1000),
        _job("a1", "a", 1, 2, 4),  # quota: best fit puts it next to b1 on n1
        _job("b2", "b", 2, 2, 1000),  # fills half of n2
        _job("a2", "a", 6, 4, 100),  # a has 4 GPUs of quota free, but no node has 4 free
    ]
    _, q = _sim(jobs, "fifo", "quota")
    assert q["a1"].placement == {"n1": [2, 3]}
    # -N 1 --gres=gpu:4 cannot spread: it waits until b1 leaves n1, then runs at full speed
    assert q["a2"].placement == {"n1": [0, 1, 2, 3]} and q["a2"].start == 1000 and q["a2"].run_s == 100
    _, c = _sim(jobs, "fifo", "cells")
    assert c["a2"].start == 6 and c["a2"].run_s == 100 and len(c["a2"].placement) == 1  # a's own node


@pytest.mark.parametrize("mode", ["cells", "quota"])
def test_no_job_runs_faster_than_its_best_placement(mode: str) -> None:
    jobs = [_job(f"j{i}", "ab"[i % 2], i * 5.0, [1, 2, 4, 3][i % 4], 50 + 10 * i) for i in range(12)]
    run, _ = _sim(jobs, "qos", mode)
    for r in run.records:
        if r.end is not None:
            assert r.run_s >= r.best_s - 1e-9
            assert r.end - r.job.arrival >= r.best_s - 1e-9


def test_opportunistic_job_is_preempted_and_requeued() -> None:
    jobs = [
        _job("opp", "b", 0, 4, 100, opp=True),
        _job("ga", "a", 10, 4, 50),
        _job("gb", "b", 10, 4, 70),
    ]
    _, rec = _sim(jobs, "fifo", "cells")
    assert rec["opp"].preemptions == 1
    assert rec["ga"].start == 10 and rec["gb"].start == 10  # guaranteed jobs never wait for it
    assert rec["opp"].start == 60 and rec["opp"].end == 160  # restarts from scratch when a's node frees
    assert rec["opp"].queue_s == 60


def test_bad_node_takes_effect_for_its_window() -> None:
    # THREE nodes, a and b own one each; n1 is bad from 0 to 50 and n3 busy with c's long job
    three = {
        "cluster": dict(
            TWO_NODES["cluster"],
            physical_cells=[{"type": "G-NODE", "nodes": [n]} for n in ("n1", "n2", "n3")],
        ),
        "virtual_clusters": {
            "a": {"cells": {"G-NODE": 1}},
            "b": {"cells": {"G-NODE": 1}},
            "c": {"cells": {"G-NODE": 1}},
        },
    }
    jobs = [_job("c1", "c", 0.2, 4, 500), _job("b1", "b", 0.5, 4, 500), _job("a1", "a", 1, 4, 10)]
    spec = build_spec(three)
    platform = build_platform(spec, QosSettings())
    runtime = build_runtime(spec, platform, QosSettings())
    for bad, last_start in (([BadNode("n1", 0, 50)], 50), ([], 1)):
        run = Simulation(spec, jobs, "fifo", "cells", runtime, platform, bad_nodes=bad).run()
        for r in run.records:
            if bad and r.start is not None and r.start < 50:
                assert "n1" not in r.placement  # never bound while bad
        # three whole-node jobs, two healthy nodes: one of them waits until n1 is healthy again
        assert max(r.start or 0 for r in run.records) == last_start


def test_quota_mode_sharing_anomaly_by_hand() -> None:
    jobs = [
        _job("b1", "b", 0, 2, 1000),
        _job("a1", "a", 1, 2, 4),
        _job("b2", "b", 2, 2, 1000),
        _job("a2", "a", 6, 4, 100),  # quota: no node with 4 free GPUs until b1 ends at 1000
        _job("a3", "a", 7, 4, 100),  # then waits for a's 4-GPU limit until a2 ends at 1100
    ]
    spec = build_spec(TWO_NODES)
    qos = QosSettings()
    platform = build_platform(spec, qos)
    runtime = build_runtime(spec, platform, qos)
    cells, quota = run_all(Experiment(spec, jobs, runtime, platform), ["fifo"], ["cells", "quota"])
    assert cells.vcs["a"]["private_avg_queue_s"] == pytest.approx(99 / 3)  # a3 waits 7 -> 106
    assert cells.vcs["a"]["excess_queue_s"] == 0.0
    # the quota baseline is a alone on a pool of one node, Slurm's rules: the same waits as its cells
    assert quota.vcs["a"]["private_avg_queue_s"] == pytest.approx(99 / 3, abs=1e-3)
    # quota waits: a1 0, a2 1000 - 6, a3 1100 - 7
    assert quota.vcs["a"]["excess_queue_s"] == pytest.approx((994 + 1093) / 3 - 99 / 3, abs=1e-3)
    assert quota.vcs["b"]["excess_queue_s"] == 0.0


def test_cells_mode_has_no_sharing_anomaly() -> None:
    jobs = []
    for i in range(40):
        vc = "ab"[i % 2]
        jobs.append(_job(f"j{i}", vc, i * 7.0, [2, 1, 4, 2, 1][i % 5], 30 + (i * 37) % 90, opp=i % 6 == 5))
    spec = build_spec(TWO_NODES)
    qos = QosSettings()
    platform = build_platform(spec, qos)
    exp = Experiment(spec, jobs, build_runtime(spec, platform, qos), platform)
    for policy in ("fifo", "qos"):
        cells, quota = run_all(exp, [policy], ["cells", "quota"])
        for vc in ("a", "b"):
            assert cells.vcs[vc]["excess_queue_s"] == 0.0
            assert cells.vcs[vc]["avg_queue_s"] == cells.vcs[vc]["private_avg_queue_s"]
        assert cells.avg_queue_s > 0  # the workload really queues
        assert sum(e.get("opportunistic_jobs", 0) for e in cells.vcs.values()) == 6
        assert quota.jobs == 40


def test_guaranteed_job_never_waits_while_its_own_cells_are_free() -> None:
    from hivebatch.cells import Request

    jobs = [
        _job(f"j{i}", "ab"[(i * 7) % 3 % 2], i * 3.0, [1, 2, 4, 2][i % 4], 20 + (i * 13) % 60)
        for i in range(60)
    ]
    checked = 0

    def check(sim: Simulation, now: float, outcomes: list) -> None:
        nonlocal checked
        for rec in sim.waiting.values():
            task = rec.task
            d = sim.alloc.try_allocate(Request(rec.job.job_id, task.vc, task.gpus, task.shape.d_node))
            assert d.result != "placed", (
                f"{rec.job.job_id} waits at {now} although {task.vc}'s cells could hold it"
            )
            checked += 1

    _sim(jobs, "qos", "cells", after_round=check)
    assert checked > 0  # the workload really queues


@pytest.mark.parametrize("mode", ["cells", "quota"])
@pytest.mark.parametrize("policy", ["qos", "fifo", "tetris-perf"])
def test_model_jobs_never_beat_their_best_placement(mode: str, policy: str) -> None:
    from hivebatch.sim.workload import paper_workload

    jobs = paper_workload(12, 4, seed=3, vc_gpus={"a": 4, "b": 4})
    run, _ = _sim(jobs, policy, mode)
    assert len(run.records) > 20
    for r in run.records:
        assert r.end is not None
        assert r.best_s > 0 and r.run_s >= r.best_s - 1e-9


def test_private_pool_is_whole_nodes_of_a_uniform_cluster() -> None:
    from hivebatch.sim.runner import private_nodes

    spec = build_spec(TWO_NODES)
    assert private_nodes(spec, "a") == ["n1"] and private_nodes(spec, "b") == ["n1"]
    half = dict(TWO_NODES, virtual_clusters={"a": {"cells": {"G-BOARD": 1}}, "b": {"cells": {"G-NODE": 1}}})
    assert private_nodes(build_spec(half), "a") is None  # 2 GPUs are no whole node: cells baseline


def test_makespan_bound_by_hand() -> None:
    # five 1-GPU jobs of 100 s in a's 4-GPU node: the fifth waits for the first, ends at 200
    jobs = [_job(f"j{i}", "a", 0, 1, 100) for i in range(5)]
    run, _ = _sim(jobs, "fifo", "cells")
    s = summarize(run)
    assert s.makespan_s == 200
    # arrival bound 0 + 100; work bound 5 x 100 GPU-s / 8 GPUs = 62.5
    assert s.makespan_bound_s == 100 and s.makespan_ratio == 2.0
    late = [*jobs, _job("late", "b", 400, 1, 50), _job("w", "b", 0, 4, 300)]
    s = summarize(_sim(late, "fifo", "cells")[0])
    # arrival bound 400 + 50; work (500 + 50 + 1200) / 8 = 218.75
    assert s.makespan_bound_s == 450 and s.makespan_s == 450 and s.to_json()["makespan_ratio"] == 1.0


def test_the_qos_ceiling_counts_the_jobs_that_can_meet_their_ect_at_all() -> None:
    # an urgent job's ECT is its arrival (c = 0): no policy can meet it, so the ceiling leaves it out;
    # every normal job could meet its ECT (200 s) alone, but a's node runs one at a time, so n3 misses it
    jobs = [_job("u", "a", 0, 4, 100, cls="urgent"), *(_job(f"n{i}", "a", 0, 4, 100) for i in (1, 2, 3))]
    run, rec = _sim(jobs, "fifo", "cells")
    assert [rec[j].met_qos for j in ("u", "n1", "n2", "n3")] == [False, True, True, False]
    s = summarize(run)
    assert s.qos_ceiling == 3 / 4 and s.to_json()["qos_ceiling"] == 0.75 and s.qos_rate == 2 / 4


def test_with_a_cycle_decisions_wait_for_the_next_cycle_as_the_controller_does() -> None:
    # j1 arrives between cycles; j2 waits for a's node, which j1 frees between cycles too
    jobs = [_job("j1", "a", 10, 4, 100), _job("j2", "a", 20, 4, 50), _job("j3", "b", 60, 1, 30)]
    _, at_once = _sim(jobs)
    assert [(at_once[j].start, at_once[j].end) for j in ("j1", "j2", "j3")] == [
        (10, 110),
        (110, 160),
        (60, 90),
    ]
    _, cycled = _sim(jobs, cycle_s=60.0)
    # j1 waits for the cycle at 60, j2 for the first one after j1 ends at 160; j3, arriving at the cycle's
    # instant, is not seen by it (a job submitted as a cycle runs is not in that cycle's squeue) but by the
    # next, at 120, although the cycle at 60 was due for j1 anyway: what a cycle sees does not depend on
    # whether it had something else to decide, so a VC alone on its private cluster is decided alike
    assert [(cycled[j].start, cycled[j].end) for j in ("j1", "j2", "j3")] == [
        (60, 160),
        (180, 230),
        (120, 150),
    ]
    _, alone = _sim([j for j in jobs if j.job_id == "j3"], cycle_s=60.0)
    assert (alone["j3"].start, alone["j3"].end) == (120, 150)


def test_a_start_latency_delays_each_start_and_holds_the_gpus_meanwhile() -> None:
    # the j1/j2 queue of the cycle test, each job starting 5 s after its cycle's decision: j2's cycle
    # comes after j1's later end, and both waits count the latency, as Slurm's start times do
    jobs = [_job("j1", "a", 10, 4, 100), _job("j2", "a", 20, 4, 50)]
    run, rec = _sim(jobs, cycle_s=60.0, start_latency_s=5.0)
    assert [(rec[j].start, rec[j].end) for j in ("j1", "j2")] == [(65, 165), (185, 235)]
    assert summarize(run).avg_queue_s == pytest.approx(((65 - 10) + (185 - 20)) / 2)
    with pytest.raises(HivebatchError, match="start latency cannot be negative"):
        _sim(jobs, start_latency_s=-1.0)


def test_a_cycle_must_be_positive() -> None:
    with pytest.raises(HivebatchError, match="cycle_s must be > 0"):
        _sim([_job("j1", "a", 0, 1, 10)], cycle_s=0.0)


# VC x owns both nodes of TWO_NODES
ONE_VC = {**TWO_NODES, "virtual_clusters": {"x": {"cells": {"G-NODE": 2}}}}


def _one_vc() -> tuple[Any, Any, Any]:
    """ONE_VC's spec, platform and runtime."""
    spec = build_spec(ONE_VC)
    qos = QosSettings()
    platform = build_platform(spec, qos)
    return spec, platform, build_runtime(spec, platform, qos)


def _ranked(jobs: list[SimJob], notice: SimNotice, **kw: Any) -> dict[str, JobRecord]:
    """``jobs`` (without a model: each runs on the shape it asks for, as a replayed trace job does) on
    ONE_VC as the controller runs them: qos, cycles of 30 s, classes ranked, reservations."""
    spec, platform, runtime = _one_vc()
    kw.setdefault("backfill", True)
    run = Simulation(
        spec, [replace(j, model=None) for j in jobs], "qos", "cells", runtime, platform, notice=notice,
        cycle_s=30.0, class_priority=True, **kw,
    ).run()  # fmt: skip
    return {r.job.job_id: r for r in run.records}


def test_a_job_taken_back_before_slurm_starts_it_is_held_again_not_preempted() -> None:
    jobs = [_job("a", "x", 0, 4, 1000), _job("h", "x", 40, 8, 100, cls="prior")]
    rec = _ranked(jobs, SimNotice(notice_s=120, requeue_delay_s=50), start_latency_s=40.0)
    # a is placed at 30 to start at 70; h takes the VC back at the cycle at 60, before a has run, and
    # starts 40 s after the next cycle's decision; a, never started, waits without a requeue delay for
    # the cycle after h's end (230) and starts 40 s later
    assert (rec["a"].preemptions, rec["a"].lost_gpu_s) == (0, 0.0)
    assert rec["h"].first_start == 130 and rec["a"].first_start == rec["a"].start == 280


def test_a_higher_class_takes_its_vc_back_once_with_notice_and_its_victims_wait_for_it() -> None:
    jobs = [
        _job("a", "x", 0, 4, 1000),  # runs on one node from the cycle at 30
        _job("h", "x", 40, 8, 100, cls="prior"),  # needs both nodes: a must leave
        _job("b", "x", 40, 4, 1000),  # takes the free node first (it can meet its deadline) and is told too
    ]
    rounds: list[float] = []
    rec = _ranked(jobs, SimNotice(notice_s=120), after_round=lambda sim, now, outs: rounds.append(now))
    # a and b leave at their signals (60 and 90); neither comes back while h waits, so h starts at the
    # next cycle, and they after it, at the first cycle after it ends
    assert rounds == [30, 60, 90, 120, 240]
    assert rec["h"].first_start == 120 and (rec["a"].preemptions, rec["b"].preemptions) == (1, 1)
    assert rec["a"].start == rec["b"].start == 240


@pytest.mark.parametrize("backfill", [True, False])
def test_a_higher_class_takes_gpus_back_when_its_vc_has_none_free(backfill: bool) -> None:
    # as the controller does (its round plans every waiting job, whatever its VC has free): on the
    # lab replay of the Philly 2271 slice, cv's and sys's prior and urgent jobs waited 0.5-1.6 trace
    # min, where a simulator that left a full VC's jobs out of the round had them wait 5-7. Without
    # backfill too: the VC's free GPUs (none) count the lower class's GPUs as taken.
    jobs = [
        _job("a", "x", 0, 4, 1000),
        _job("b", "x", 0, 4, 1000),  # a and b hold both of x's nodes from the cycle at 30
        _job("h", "x", 40, 4, 100, cls="prior"),
    ]
    rec = _ranked(jobs, SimNotice(notice_s=0), backfill=backfill)
    assert rec["h"].first_start == 60  # the first cycle after its arrival, not after a's or b's end
    assert rec["a"].preemptions + rec["b"].preemptions == 1


def _victim_beside_fillers(v_at: float, h_at: float) -> list[SimJob]:
    """v (1 GPU) arriving at ``v_at``, f1 (4 GPUs, long) and f2 (3 GPUs, 200 s) at 1 and 2, and a
    prior job h (1 GPU, 500 s) at ``h_at`` that finds x full and takes v's GPU."""
    return [
        _job("v", "x", v_at, 1, 1000),
        _job("f1", "x", 1, 4, 2000),
        _job("f2", "x", 2, 3, 200),
        _job("h", "x", h_at, 1, 500, cls="prior"),
    ]


def test_a_requeued_job_waits_for_its_own_gpu_indices_with_keeps_indices() -> None:
    # x's 8 GPUs: v on n1 [3], f2 on n1 [0-2], f1 on all of n2; h (prior) takes v's GPU at 60 and
    # runs to 560; f2 ends at 230 and frees n1 [0-2]
    jobs = _victim_beside_fillers(v_at=0, h_at=40)
    free = _ranked(jobs, SimNotice(notice_s=0, keeps_indices=False))
    assert free["v"].preemptions == 1 and free["h"].first_start == 60
    assert free["v"].start == 240  # the first cycle after f2's end, on one of the GPUs f2 left
    kept = _ranked(jobs, SimNotice(notice_s=0, keeps_indices=True))
    assert (kept["v"].preemptions, kept["h"].first_start, kept["h"].end) == (1, 60, 560)
    # Slurm keeps v's typed gres (gpu:g3): index 3 is h's on n1 and f1's on n2 until h ends
    assert kept["v"].start == 570
    assert kept["v"].locked is None


def test_a_requeued_job_pinned_untyped_resumes_on_any_free_gpu_of_its_vc() -> None:
    # f1 takes n2 and f2 n1 [0-2] at 30; v then takes n1's last free GPU at 60, which the controller
    # pins untyped; h (prior) takes it back at 90 and runs to 590; f2 ends at 230
    jobs = _victim_beside_fillers(v_at=35, h_at=70)
    untyped = _ranked(jobs, SimNotice(notice_s=0, keeps_indices=True, untyped_pins=True))
    # f1 took the whole of n2 (untyped as well); f2 took 3 of n1's 4 free GPUs (typed)
    assert (untyped["v"].untyped, untyped["f2"].untyped, untyped["f1"].untyped) == (True, False, True)
    assert untyped["v"].preemptions == 1 and untyped["h"].first_start == 90
    assert untyped["v"].start == 240  # the first cycle after f2's end, on a GPU f2 left
    typed = _ranked(jobs, SimNotice(notice_s=0, keeps_indices=True))
    assert typed["v"].untyped is None and typed["v"].start == 600  # its own index, once h has ended


def test_the_cycles_fall_at_their_phase() -> None:
    jobs = [_job("j1", "a", 10, 4, 100)]
    _, at0 = _sim(jobs, cycle_s=60.0)
    _, at25 = _sim(jobs, cycle_s=60.0, cycle_phase_s=25.0)
    _, at5 = _sim(jobs, cycle_s=60.0, cycle_phase_s=5.0)
    assert (at0["j1"].start, at25["j1"].start, at5["j1"].start) == (60, 25, 65)
    with pytest.raises(HivebatchError, match="cycle_phase_s must be in"):
        _sim(jobs, cycle_s=60.0, cycle_phase_s=60.0)
