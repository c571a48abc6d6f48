"""--target-load: each VC sized to its own demand, never below its largest job."""

from __future__ import annotations

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.sim.scaling import fit_vc_nodes
from hivebatch.sim.workload import SimJob


def _job(jid: str, vc: str, t: float, gpus: int, dur: float) -> SimJob:
    return SimJob(job_id=jid, vc=vc, cls="normal", arrival=t, gpus=gpus, duration_s=dur)


def test_each_vc_gets_the_fewest_nodes_that_keep_it_at_the_target() -> None:
    day = 86400.0
    jobs = [
        _job("a1", "a", 0, 8, 10 * day),  # a: 80 GPU-days over a 10-day span = 8 GPUs busy on average
        _job("b1", "b", 0, 1, 2 * day),
        _job("b2", "b", 9.5 * day, 16, 0.5 * day),  # b: 10 GPU-days, but one job needs 2 nodes
    ]
    s = fit_vc_nodes(jobs, {"a": 64, "b": 64}, 0.5)
    assert s.span_s == 10 * day  # first arrival to the last arrival + duration
    a, b = s.vcs
    assert (a.nodes_before, a.nodes_after) == (64, 2)  # 8 GPUs busy / 0.5 = 16 GPUs = 2 nodes
    assert a.load_after == pytest.approx(0.5) and not a.floor_by_largest_job
    assert b.nodes_after == 2 and b.floor_by_largest_job  # demand alone asks for 1 node
    assert b.load_after == pytest.approx(1.0 / 16)
    assert s.load_before == pytest.approx((8 + 1) / (128 * 8))
    assert s.vc_nodes() == {"a": 2, "b": 2}
    assert "64->2 (50%)" in s.summary() and "held up by its largest job" in s.summary()
    assert s.as_dict()["vcs"]["b"]["largest_job_sets_size"] is True  # type: ignore[index]


@pytest.mark.parametrize("load", [0.0, -0.5, 1.5])
def test_target_load_out_of_range_is_refused(load: float) -> None:
    with pytest.raises(HivebatchError, match="--target-load must be in"):
        fit_vc_nodes([_job("a", "a", 0, 1, 1), _job("b", "a", 5, 1, 1)], {"a": 1}, load)


def test_a_workload_without_durations_is_refused() -> None:
    with pytest.raises(HivebatchError, match="needs trace jobs with durations"):
        fit_vc_nodes([SimJob(job_id="m", vc="a", cls="normal", arrival=0, gpus=1)], {"a": 1}, 0.7)
