"""The inside-a-VC workloads of ``hivebatch simulate``: reservations shorten the worst wait of the
8-GPU jobs without costing QoS, and fairshare shortens the light user's wait."""

from __future__ import annotations

from click.testing import CliRunner

from hivebatch.cli.hivebatch.simulate import simulate
from hivebatch.sim import vc_compare, vc_workloads


def test_mixed_stream_is_one_vc_of_1_2_and_8_gpu_jobs_with_limits_above_run_times() -> None:
    jobs = vc_workloads.mixed_stream(1, 24, 32)
    assert {j.gpus for j in jobs} == {1, 2, 8} and {j.vc for j in jobs} == {vc_workloads.VC}
    assert all(j.time_limit_s is not None and j.duration_s is not None for j in jobs)
    assert all(j.time_limit_s >= j.duration_s for j in jobs if j.time_limit_s and j.duration_s)
    assert jobs == vc_workloads.mixed_stream(1, 24, 32)  # same seed, same jobs


def test_reservations_shorten_the_worst_wait_of_large_jobs_and_keep_the_qos_rate() -> None:
    off, on = vc_compare.starvation(seed=2, hours=24)
    assert (off.rule, on.rule) == ("off", "on") and off.big_jobs == on.big_jobs > 0
    assert on.big_worst_wait_s < 0.8 * off.big_worst_wait_s
    assert on.big_mean_wait_s < off.big_mean_wait_s
    assert on.qos_rate >= off.qos_rate - 0.005


def test_fairshare_shortens_the_light_users_wait() -> None:
    off, on = vc_compare.fairness(seed=1, hours=24)
    assert off.light_mean_wait_s > 0
    assert on.light_mean_wait_s < off.light_mean_wait_s / 4
    assert on.heavy_mean_wait_s > off.heavy_mean_wait_s  # the turns the light user gets are the heavy's


def test_simulate_prints_both_comparisons() -> None:
    for workload in ("starvation", "fairness"):
        res = CliRunner().invoke(simulate, ["--workload", workload, "--hours", "6", "--seed", "1"])
        assert res.exit_code == 0, res.output
        lines = [ln.split("\t") for ln in res.output.strip().splitlines()]
        assert [ln[:2] for ln in lines[1:]] == [[workload, "off"], [workload, "on"]]
