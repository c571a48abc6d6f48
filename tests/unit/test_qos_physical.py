"""The default form is physical by construction: NNLS optimality, positivity and monotonicity over
the whole shape space of every shipped profile, and bounded extrapolation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qos_helpers import simple_profile

from hivebatch.errors import HivebatchError
from hivebatch.qos import ProfileStore, Shape, predict_throughput, step_time
from hivebatch.qos.nnls import nnls
from hivebatch.qos.perfmodel import predict_with_range

SHIPPED = [p for p in ProfileStore.load(None).profiles() if p.form == "default"]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 12),
    st.integers(1, 6),
    st.integers(0, 2**31),
)
def test_nnls_meets_the_optimality_conditions(m: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, n))
    b = rng.normal(size=m)
    x = nnls(a, b)
    grad = a.T @ (b - a @ x)  # minus the gradient of ½‖ax − b‖²
    assert (x >= 0).all()
    # KKT: no free direction improves; active coefficients sit at a stationary point
    assert (grad <= 1e-8).all()
    assert np.allclose(grad[x > 0], 0.0, atol=1e-8)


def test_nnls_settles_when_a_gradient_is_only_rounding_noise() -> None:
    # a relative-error fit on real profile rows whose right-hand side lies in the span of the
    # columns: one coefficient's gradient is ~1e-12 and re-admitting it used to cycle forever
    data = np.load(Path(__file__).parent.parent / "fixtures" / "qos" / "nnls-rounding-cycle.npz")
    a, b = data["a"], data["b"]
    x = nnls(a, b)
    grad = a.T @ (b - a @ x)
    assert (x >= 0).all()
    assert (grad <= 1e-8).all()
    assert np.allclose(grad[x > 0], 0.0, atol=1e-8)


def test_nnls_matches_unconstrained_when_that_is_non_negative() -> None:
    a = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    truth = np.array([0.5, 1.5])
    assert nnls(a, a @ truth) == pytest.approx(truth)


def test_shipped_profiles_are_all_physical() -> None:
    assert SHIPPED and all(p.physical for p in SHIPPED), [p.name for p in SHIPPED if not p.physical]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(SHIPPED),
    st.integers(1, 64),
    st.integers(1, 8),
    st.floats(1.0, 1e5),
)
def test_step_time_positive_and_monotone_over_the_shape_space(prof, nodes: int, gpn: int, w: float) -> None:  # type: ignore[no-untyped-def]
    shape = Shape(nodes, gpn)
    t = step_time(prof, w * shape.gpus, shape)
    assert np.isfinite(t) and t > 0
    # per-GPU batch up: never faster per step, never slower per sample than linear
    t_bigger = step_time(prof, 2 * w * shape.gpus, shape)
    assert t <= t_bigger * (1 + 1e-12)
    # more nodes or more GPUs per node at the same per-GPU batch: never faster; leaving a single GPU,
    # never faster than the single GPU's time without its own measured factor (it may measure slower
    # per step than two GPUs: hivebatch.qos.correction)
    reference = t
    if shape == Shape(1, 1) and prof.correction is not None:
        own = prof.correction.shapes.get((1, 1), 1.0)
        reference = t / own * min(own, 1.0)
    for more in (Shape(nodes + 1, gpn), Shape(nodes, gpn + 1)):
        assert reference <= step_time(prof, w * more.gpus, more) * (1 + 1e-12)
    pred = predict_with_range(prof, w * shape.gpus, shape)
    assert 0 < pred.low <= pred.throughput <= pred.high < np.inf


def test_non_physical_coefficients_are_refused_in_the_physical_form() -> None:
    with pytest.raises(HivebatchError, match="must be >= 0"):
        simple_profile(t0=0.1, s_lognode=-1.0, overlap=0.0)
    with pytest.raises(HivebatchError, match="overlap <= 1"):
        simple_profile(t0=0.1, overlap=1.5)
    with pytest.raises(HivebatchError, match="t0 \\+ t_w"):
        simple_profile(s_multi=0.1, overlap=0.5)


def test_overlap_hides_sync_behind_compute() -> None:
    # C = 0.01·w', S = 0.1 on two GPUs, half of C overlaps: T = C + max(0, S − C/2)
    prof = simple_profile(t_w=0.01, s_multi=0.1, overlap=0.5)
    assert step_time(prof, 2 * 4, Shape(1, 2)) == pytest.approx(0.04 + 0.1 - 0.02)
    assert step_time(prof, 2 * 40, Shape(1, 2)) == pytest.approx(0.4)  # sync fully hidden
    assert step_time(prof, 40, Shape(1, 1)) == pytest.approx(0.4)


def test_range_inside_is_the_measured_error_and_outside_is_bounded() -> None:
    prof = simple_profile(t0=0.02, t_w=0.001, s_multi=0.01, s_lognode=0.03, overlap=0.0)
    prof.mape_holdout = 5.0
    prof.extra["local_batch_range"] = [16.0, 128.0]
    prof.extra["shapes_profiled"] = ["1x1", "1x2", "2x2"]
    inside = predict_with_range(prof, 64 * 4, Shape(2, 2))
    assert inside.outside == ()
    assert inside.low == pytest.approx(inside.throughput / 1.05)
    assert inside.high == pytest.approx(inside.throughput / 0.95)
    big = predict_with_range(prof, 1024, Shape(1, 1))
    assert big.outside == ("local batch 1024 above the profiled 128",)
    # between "per-sample time as at batch 128" and "step time as at batch 128"
    t128 = step_time(prof, 128, Shape(1, 1))
    assert big.low == pytest.approx(128 / t128 / 1.05)
    assert big.high == pytest.approx(1024 / t128 / 0.95)
    wide = predict_with_range(prof, 64 * 16, Shape(4, 4))
    assert wide.outside and "beyond the profiled 2 nodes x 2 GPUs" in wide.outside[0]
    assert wide.low < wide.throughput < wide.high
    assert predict_throughput(prof, 64 * 16, Shape(4, 4)) == wide.throughput
