"""Preemption with notice in the simulator: victims leave after their signal, a checkpointing one keeps
its progress, and the preempting job starts when they have left."""

from __future__ import annotations

import pytest

from hivebatch.qos import QosSettings
from hivebatch.sim import setup
from hivebatch.sim.engine import Simulation
from hivebatch.sim.notice import SimNotice
from hivebatch.sim.workload import SimJob

H = 3600.0


def _run(notice: SimNotice | None, checkpoints: bool) -> dict[str, object]:
    spec = setup.build_spec(setup.node8_config({"a": 1}))
    qos = QosSettings()
    platform = setup.build_platform(spec, qos)
    runtime = setup.build_runtime(spec, platform, qos)
    jobs = [
        SimJob("opp", "a", "normal", 0.0, 8, duration_s=10 * H, opportunistic=True, checkpoints=checkpoints),
        SimJob("own", "a", "normal", 1 * H, 8, duration_s=1 * H),
    ]
    run = Simulation(spec, jobs, "fifo", "cells", runtime, platform, notice=notice).run()
    return {r.job.job_id: r for r in run.records}


def test_preempted_at_once_loses_the_whole_run() -> None:
    recs = _run(None, checkpoints=True)
    assert recs["own"].first_start == pytest.approx(1 * H)
    assert recs["opp"].lost_gpu_s == pytest.approx(1 * H * 8)
    assert recs["opp"].end == pytest.approx(12 * H)  # 1 h lost, 1 h waiting, then 10 h again


def test_a_checkpointing_victim_saves_and_leaves_and_the_owner_starts_then() -> None:
    recs = _run(SimNotice(notice_s=120, save_s=30), checkpoints=True)
    assert recs["own"].first_start == pytest.approx(1 * H + 30)
    assert recs["opp"].lost_gpu_s == pytest.approx(30 * 8)  # the time it spent saving
    # its hour of work is kept: 9 h left after the owner's hour
    assert recs["opp"].end == pytest.approx(1 * H + 30 + 1 * H + 9 * H)


def test_a_victim_without_a_trap_dies_of_its_signal_at_once() -> None:
    recs = _run(SimNotice(notice_s=120, save_s=30), checkpoints=False)
    assert recs["own"].first_start == pytest.approx(1 * H)
    assert recs["opp"].lost_gpu_s == pytest.approx(1 * H * 8)


@pytest.mark.parametrize(("delay", "back_at"), [(0.0, 1 * H + 60), (600.0, 1 * H + 600)])
def test_a_requeued_victim_starts_again_only_after_slurms_requeue_delay(delay: float, back_at: float) -> None:
    # the owner needs the node for a minute; Slurm lets the requeued victim start again only after
    # cred_expire + 1 s (tests/fixtures/slurm/sacct_requeued_runs.txt), so it idles past the owner's end
    spec = setup.build_spec(setup.node8_config({"a": 1}))
    qos = QosSettings()
    platform = setup.build_platform(spec, qos)
    runtime = setup.build_runtime(spec, platform, qos)
    jobs = [
        SimJob("opp", "a", "normal", 0.0, 8, duration_s=10 * H, opportunistic=True),
        SimJob("own", "a", "normal", 1 * H, 8, duration_s=60),
    ]
    notice = SimNotice(notice_s=120, requeue_delay_s=delay)
    recs = {
        r.job.job_id: r
        for r in Simulation(spec, jobs, "fifo", "cells", runtime, platform, notice=notice).run().records
    }
    assert recs["own"].first_start == pytest.approx(1 * H) and recs["opp"].preemptions == 1
    assert recs["opp"].start == pytest.approx(back_at)
