"""Resizable runs in the simulator: a run grows into idle GPUs, goes back to its own shape when a job
waits, keeps its work across a resize, and gives GPUs back to a task that would miss its ECT."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hivebatch.config import read_yaml
from hivebatch.errors import HivebatchError
from hivebatch.qos import Shape
from hivebatch.sim import setup
from hivebatch.sim.engine import JobRecord, Simulation
from hivebatch.sim.resize import Resizing
from hivebatch.sim.workload import SimJob, paper_workload

COST = 60.0


@pytest.fixture(scope="module")
def paper() -> tuple[Any, Any, Any]:
    """The paper's 4 x 4 GPUs as one VC, with no GPUs kept free at start (resizing fills them)."""
    data = setup.single_vc_config(read_yaml(setup.paper_config_path()))
    spec = setup.build_spec(data)
    qos = setup.qos_settings(data, setup.paper_config_path().parent)
    platform = dataclasses.replace(setup.build_platform(spec, qos), keep_free_gpus=16)
    return spec, platform, setup.build_runtime(spec, platform, qos)


def _job(
    jid: str, cls: str, at: float, model: str = "resnet50", batch: int = 64, iters: int = 20000
) -> SimJob:
    return SimJob(jid, "all", cls, at, 1, model=model, batch=batch, iters=iters)


def _run(
    paper: tuple[Any, Any, Any], jobs: list[SimJob], resizing: Resizing | None, **kw: Any
) -> dict[str, JobRecord]:
    spec, platform, runtime = paper
    run = Simulation(spec, jobs, "qos", "cells", runtime, platform, resizing=resizing, **kw).run()
    return {r.job.job_id: r for r in run.records}


def test_a_lone_run_grows_into_its_idle_vc_for_free_before_it_starts(paper: tuple[Any, Any, Any]) -> None:
    fixed = _run(paper, [_job("a", "normal", 0.0)], None)["a"]
    grown = _run(paper, [_job("a", "normal", 0.0)], Resizing(COST))["a"]
    assert fixed.shape == grown.own_shape == Shape(1, 4)  # the policy's choice
    assert grown.shape is not None and grown.shape.gpus == 16 and grown.resizes == 1
    assert grown.resize_s == 0.0  # grown in the round that placed it: no run to save yet
    assert grown.end == pytest.approx(paper[2].run_time(grown.job, grown.placement))
    assert grown.end is not None and fixed.end is not None and grown.end < fixed.end


def test_a_grown_run_goes_back_to_its_own_shape_for_a_waiting_job_and_keeps_its_work(
    paper: tuple[Any, Any, Any],
) -> None:
    alone_fixed = _run(paper, [_job("a", "normal", 0.0)], None)["a"]
    alone_grown = _run(paper, [_job("a", "normal", 0.0)], Resizing(COST))["a"]
    assert alone_fixed.end is not None and alone_grown.end is not None
    # b runs long, so a ends on its own shape before any GPUs free up again
    recs = _run(paper, [_job("a", "normal", 0.0), _job("b", "normal", 600.0, iters=400000)], Resizing(COST))
    a, b = recs["a"], recs["b"]
    assert b.first_start == pytest.approx(600.0)
    assert a.shape == a.own_shape == Shape(1, 4) and a.resizes == 2
    done = 600.0 / alone_grown.end  # its first run, on all 16 GPUs, had done this share by then
    assert a.end == pytest.approx(600.0 + COST + alone_fixed.end * (1.0 - done))
    assert a.queue_s == pytest.approx(0.0)  # time run before a resize is run, not waiting


def test_a_run_with_slack_gives_gpus_back_to_a_task_that_would_miss_its_ect(
    paper: tuple[Any, Any, Any],
) -> None:
    jobs = [_job(f"f{i}", "normal", 0.0, iters=40000) for i in range(4)]
    jobs.append(_job("p", "prior", 600.0, model="googlenet", batch=32, iters=2000))
    fixed = _run(paper, jobs, None)
    assert not fixed["p"].met_qos  # every node is taken by a 1x4 run for hours
    resized = _run(paper, jobs, Resizing(COST))
    assert resized["p"].first_start == pytest.approx(600.0) and resized["p"].met_qos
    donors = [r for jid, r in resized.items() if jid != "p" and r.resizes]
    assert donors, "no run gave GPUs back"
    for r in donors:
        assert r.own_shape is not None and r.own_shape.gpus < 4  # it gave GPUs back for good while p ran
    assert all(r.met_qos for jid, r in resized.items() if jid != "p")  # the donors still meet theirs


def test_a_paper_day_with_resizes_keeps_the_cells_whole_and_no_run_beats_its_best(
    paper: tuple[Any, Any, Any],
) -> None:
    spec, platform, runtime = paper
    jobs = paper_workload(10.0, 24.0, 1, {vc: spec.vc_gpus(vc) for vc in spec.vcs}, 0.0)

    def check(sim: Simulation, now: float, outcomes: list[Any]) -> None:
        sim.alloc.check_invariants()
        in_use = sum(sum(len(g) for g in r.placement.values()) for r in sim.running.values())
        assert in_use == sum(sim.used.values())

    run = Simulation(
        spec, jobs, "qos", "cells", runtime, platform, resizing=Resizing(COST), after_round=check
    )
    recs = run.run().records
    assert all(r.end is not None for r in recs)
    assert sum(r.resizes for r in recs) > 0
    for r in recs:
        assert r.end is not None and r.end >= r.job.arrival + r.best_s - 1e-6


def test_resizing_is_for_cells_mode_and_costs_no_less_than_nothing(paper: tuple[Any, Any, Any]) -> None:
    spec, platform, runtime = paper
    sim = Simulation(
        spec, [_job("a", "normal", 0.0)], "qos", "quota", runtime, platform, resizing=Resizing(COST)
    )
    assert sim.resizing is None
    with pytest.raises(HivebatchError, match="resize cost cannot be negative"):
        Resizing(-1.0)
    with pytest.raises(HivebatchError, match="min_gain"):
        Resizing(COST, min_gain=1.0)
