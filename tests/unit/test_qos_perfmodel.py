"""Formulas (4)-(8) and the default form, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
from qos_helpers import simple_profile, toy_profile

from hivebatch.qos import (
    Profile,
    Shape,
    comm_penalty,
    latency,
    local_batch,
    predict_throughput,
    single_gpu_throughput,
)
from hivebatch.qos.correction import Correction
from hivebatch.qos.perfmodel import ModelRangeError, forecast, predict_with_range, step_time


def paper_profile(
    k0: float = 10.0, k1: float = 2.0, k2: float = -0.01, gamma: float = 0.5, lam: float = 3.0
) -> Profile:
    return Profile("p", "K80", "paper", {"k0": k0, "k1": k1, "k2": k2, "gamma": gamma, "lambda": lam})


def test_shape_counts_gpus_and_rejects_zero() -> None:
    assert Shape(2, 4).gpus == 8
    assert str(Shape(2, 4)) == "2x4"
    with pytest.raises(ModelRangeError):
        Shape(0, 4)


def test_local_batch_is_global_over_gpus() -> None:
    assert local_batch(64, Shape(2, 4)) == 8.0
    assert local_batch(10, Shape(1, 4)) == 2.5


def test_local_batch_below_one_sample_is_refused() -> None:
    with pytest.raises(ModelRangeError, match="local batch of 0.5"):
        local_batch(4, Shape(2, 4))
    with pytest.raises(ModelRangeError):
        local_batch(0, Shape(1, 1))


def test_single_gpu_quadratic() -> None:
    # 10 + 2·20 − 0.01·400 = 46
    assert single_gpu_throughput(10, 2, -0.01, 20) == pytest.approx(46.0)


def test_comm_penalty_hand_cases() -> None:
    assert comm_penalty(0.5, 3.0, Shape(1, 1)) == 0.0
    # one node × 4: γ·(0 + 3)/3 = γ
    assert comm_penalty(0.5, 3.0, Shape(1, 4)) == pytest.approx(0.5)
    # 2 nodes × 2: γ·(λ·1·2 + 1)/3 = 0.5·7/3
    assert comm_penalty(0.5, 3.0, Shape(2, 2)) == pytest.approx(0.5 * 7 / 3)
    # 4 nodes × 1: γ·(λ·3 + 0)/3 = γλ
    assert comm_penalty(0.5, 3.0, Shape(4, 1)) == pytest.approx(1.5)


def test_paper_throughput_and_latency() -> None:
    prof = paper_profile()
    # batch 80 on 2x2: w' = 20, sPR = 46, Comm = 7/6 → PR = (4 − 7/6)·46
    pr = predict_throughput(prof, 80, Shape(2, 2))
    assert pr == pytest.approx((4 - 7 / 6) * 46)
    # Lat = 80·100/PR + 30
    assert latency(prof, 80, 100, Shape(2, 2), 30) == pytest.approx(8000 / pr + 30)


def test_paper_form_refuses_nonpositive_throughput() -> None:
    prof = paper_profile(gamma=10.0)  # Comm larger than n
    with pytest.raises(ModelRangeError, match="<= 0"):
        predict_throughput(prof, 80, Shape(2, 2))
    with pytest.raises(ModelRangeError):
        predict_throughput(paper_profile(k0=-100, k1=0, k2=0), 8, Shape(1, 1))


def test_default_form_step_time_hand_case() -> None:
    prof = toy_profile()  # T = 0.01·w' + 0.1·[n>1] + 0.2·log2(d_node)
    assert step_time(prof, 40, Shape(1, 1)) == pytest.approx(0.4)
    assert step_time(prof, 40, Shape(1, 2)) == pytest.approx(0.3)
    assert step_time(prof, 40, Shape(2, 1)) == pytest.approx(0.5)
    assert step_time(prof, 40, Shape(2, 2)) == pytest.approx(0.4)
    assert predict_throughput(prof, 40, Shape(1, 2)) == pytest.approx(40 / 0.3)
    assert latency(prof, 40, 100, Shape(2, 1), 0) == pytest.approx(50.0)


def test_default_form_every_term() -> None:
    c = {
        "t0": 1.0, "t_w": 2.0, "t_sqrtw": 3.0, "s_multi": 5.0, "s_loggpn": 7.0, "s_gpn": 11.0,
        "s_lognode": 13.0, "s_lognode_gpn": 17.0, "s_w_multi": 19.0, "s_w_multi_loggpn": 23.0, "s_w_lognode": 29.0,
    }  # fmt: skip
    prof = simple_profile(**c)
    w, dn, g = 4.0, 4, 2  # batch 32 on 4x2
    expect = (
        1
        + 2 * w
        + 3 * math.sqrt(w)
        + 5
        + 7 * 1
        + 11 * 2
        + 13 * 2
        + 17 * 2 * 2
        + 19 * w
        + 23 * w * 1
        + 29 * w * 2
    )
    assert step_time(prof, 32, Shape(dn, g)) == pytest.approx(expect)


def test_default_form_never_returns_negative_time() -> None:
    prof = simple_profile(t0=0.1, s_lognode=-1.0)
    assert step_time(prof, 8, Shape(1, 1)) == pytest.approx(0.1)
    with pytest.raises(ModelRangeError, match="non-positive step time"):
        predict_throughput(prof, 8, Shape(2, 1))


def test_latency_guards() -> None:
    with pytest.raises(ModelRangeError):
        latency(toy_profile(), 40, -1, Shape(1, 1))
    with pytest.raises(ModelRangeError):
        latency(toy_profile(), 40, 10, Shape(1, 1), overhead_s=-1)
    assert latency(toy_profile(), 40, 0, Shape(1, 1), 30) == 30


def test_profile_validation() -> None:
    from hivebatch.errors import HivebatchError

    with pytest.raises(HivebatchError, match="missing coefficients"):
        Profile("x", "V100", "paper", {"k0": 1.0})
    with pytest.raises(HivebatchError, match="unknown form"):
        Profile("x", "V100", "cubic", {})
    with pytest.raises(HivebatchError, match="non-finite"):
        paper_profile(k0=float("nan"))


def test_profile_dict_round_trip() -> None:
    prof = paper_profile()
    prof.extra["cluster"] = "dgx"
    back = Profile.from_dict(prof.to_dict())
    assert back.coefficients == prof.coefficients
    assert back.extra == {"cluster": "dgx"}


def test_forecast_has_latency_only_with_iterations() -> None:
    prof, shape = toy_profile(), Shape(2, 2)
    fc = forecast(prof, 80, shape, None, 30.0)
    assert fc.prediction == predict_with_range(prof, 80, shape) and fc.latency_s is None
    fc = forecast(prof, 80, shape, 100, 30.0)
    assert fc.latency_s == pytest.approx(latency(prof, 80, 100, shape, 30.0))
    assert (fc.iters, fc.overhead_s, fc.batch, fc.shape) == (100, 30.0, 80, shape)


def test_repeated_questions_follow_a_changed_profile() -> None:
    prof = simple_profile(t0=0.1, t_w=0.01, s_multi=0.1, overlap=0.0)
    assert step_time(prof, 40, Shape(1, 2)) == pytest.approx(0.1 + 0.2 + 0.1)
    assert step_time(prof, 40, Shape(1, 2)) == pytest.approx(0.4)  # the same answer a second time
    prof.coefficients["t0"] = 0.5
    assert step_time(prof, 40, Shape(1, 2)) == pytest.approx(0.8)
    prof.correction = Correction({(1, 2): 2.0}, ())  # measured twice as slow on 1x2
    assert step_time(prof, 40, Shape(1, 2)) == pytest.approx(1.6)
