"""The measured correction on the default form: what it learns, where it applies, and that it keeps the
model physical (positive, non-decreasing in the local batch and in nodes and GPUs per node)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qos_helpers import simple_profile

from hivebatch.errors import HivebatchError
from hivebatch.qos import Profile, Shape, step_time
from hivebatch.qos.correction import BOUND, Correction, learn
from hivebatch.qos.fitting import Sample, corrected, fit_form
from hivebatch.qos.perfmodel import default_step_times

GRID = [Shape(n, g) for n in (1, 2) for g in range(1, 9)]
BATCHES = (16.0, 32.0, 64.0, 128.0)


def _form() -> Profile:
    return simple_profile(t0=0.02, t_w=0.001, s_multi=0.01, s_loggpn=0.004, s_lognode=0.03, overlap=0.2)


def _rows(
    prof: Profile, slow_shape: Shape, shape_by: float, slow_batch: float, batch_by: float
) -> list[Sample]:
    """Measurements of the form, with one shape and one batch size slower by the given factors."""
    rows = []
    for s in GRID:
        for w in BATCHES:
            t = step_time(prof, w * s.gpus, s)
            t *= (shape_by if s == slow_shape else 1.0) * (batch_by if w == slow_batch else 1.0)
            rows.append(Sample(s, w, t))
    return rows


def test_learns_a_slow_shape_and_a_slow_batch_and_predicts_them() -> None:
    form = _form()
    prof = corrected(_form(), _rows(form, Shape(2, 2), 1.15, 64.0, 1.2))
    assert prof.correction is not None
    assert prof.correction.shapes[(2, 2)] == pytest.approx(1.15)
    assert prof.correction.shapes[(1, 4)] == pytest.approx(1.0)
    assert dict(prof.correction.batches)[64.0] == pytest.approx(1.2)
    assert dict(prof.correction.batches)[32.0] == pytest.approx(1.0)
    # at a profiled point the measured time comes back; elsewhere on the grid the form's
    assert step_time(prof, 64 * 4, Shape(2, 2)) == pytest.approx(
        step_time(form, 64 * 4, Shape(2, 2)) * 1.15 * 1.2
    )
    assert step_time(prof, 32 * 4, Shape(1, 4)) == pytest.approx(step_time(form, 32 * 4, Shape(1, 4)))


def test_a_batch_factor_fades_between_profiled_batches_and_past_the_range() -> None:
    form = _form()
    fast = corrected(_form(), _rows(form, Shape(1, 1), 1.0, 128.0, 0.8))  # the largest batch runs fast
    s = Shape(1, 2)
    at = step_time(fast, 128 * 2, s) / step_time(form, 128 * 2, s)
    assert at == pytest.approx(0.8)
    # halfway (in log batch) to the profiled 64 the factor is gone: the form's time, or 64's if larger
    mid = math.sqrt(64 * 128)
    assert step_time(fast, mid * 2, s) == pytest.approx(step_time(form, mid * 2, s))
    # one doubling past the profiled range the form is back
    assert step_time(fast, 256 * 2, s) == pytest.approx(step_time(form, 256 * 2, s))
    # a fast batch never makes a bigger batch look quicker than a smaller one
    assert step_time(fast, 128 * 2, s) >= step_time(fast, 64 * 2, s)


def test_a_slow_shape_holds_back_the_larger_shapes_that_contain_it() -> None:
    form = _form()
    prof = corrected(_form(), _rows(form, Shape(1, 2), 1.25, 0.0, 1.0))  # 1x2 slow, 1x3 as the form
    slow = step_time(prof, 32 * 2, Shape(1, 2))
    assert slow == pytest.approx(step_time(form, 32 * 2, Shape(1, 2)) * 1.25)
    assert step_time(prof, 32 * 3, Shape(1, 3)) == pytest.approx(slow)
    assert step_time(prof, 32 * 16, Shape(2, 8)) >= slow


def test_a_slow_single_gpu_stands_for_itself() -> None:
    """A single GPU may measure slower per step than two (seen in ncf and imagenet on DGX): larger
    shapes are held to the form's single-GPU time, not to that measurement."""
    form = _form()
    prof = corrected(_form(), _rows(form, Shape(1, 1), 1.3, 0.0, 1.0))
    assert step_time(prof, 32, Shape(1, 1)) == pytest.approx(step_time(form, 32, Shape(1, 1)) * 1.3)
    assert step_time(prof, 64, Shape(1, 2)) == pytest.approx(step_time(form, 64, Shape(1, 2)))


def test_factors_are_bounded_and_need_two_rows() -> None:
    c = learn([(1, 1), (1, 1), (1, 2), (1, 2), (2, 2)], [8, 16, 8, 16, 8], [5.0, 5.0, 0.1, 0.1, 1.0])
    assert c.shapes[(1, 1)] == BOUND
    assert c.shapes[(1, 2)] == pytest.approx(1 / BOUND)
    assert (2, 2) not in c.shapes  # one row is not enough to say a shape deviates


def test_a_correction_survives_the_profile_store_format() -> None:
    form = _form()
    prof = corrected(_form(), _rows(form, Shape(2, 2), 1.1, 64.0, 1.2))
    back = Profile.from_dict(prof.to_dict())
    assert back.correction == prof.correction
    for s in GRID:
        assert step_time(back, 48 * s.gpus, s) == step_time(prof, 48 * s.gpus, s)


@pytest.mark.parametrize(
    "correction",
    [{"shapes": {"2-2": 1.1}}, {"shapes": {"2x2": -1}}, {"batches": {"0": 1.0}}, {"shapes": "2x2"}],
)
def test_a_malformed_correction_is_refused_in_one_line(correction: dict) -> None:
    d = _form().to_dict() | {"correction": correction}
    with pytest.raises(HivebatchError, match="malformed profile entry") as err:
        Profile.from_dict(d)
    assert "\n" not in str(err.value)


def test_only_the_physical_form_takes_a_correction() -> None:
    paper = Profile("p", "V100", "paper", {"k0": 100.0, "k1": 0.0, "k2": 0.0, "gamma": 0.1, "lambda": 1.0})
    assert corrected(paper, _rows(_form(), Shape(1, 1), 1.0, 0.0, 1.0)).correction is None
    with pytest.raises(HivebatchError, match="needs the default form"):
        dataclasses.replace(paper, correction=Correction({(1, 1): 1.1}, ()))


def test_fit_form_learns_on_the_rows_it_fits() -> None:
    rows = _rows(_form(), Shape(2, 2), 1.15, 64.0, 1.2)
    prof = fit_form("default", rows)
    assert prof.correction is not None and prof.correction.shapes[(2, 2)] > 1.05
    measured = {(s.shape, s.local_batch): s.step_time for s in rows}
    assert step_time(prof, 64 * 4, Shape(2, 2)) == pytest.approx(measured[(Shape(2, 2), 64.0)], rel=0.03)


ratios = st.floats(1 / BOUND, BOUND)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from([(s.d_node, s.d_gpn) for s in GRID]), ratios, max_size=16),
    st.dictionaries(st.sampled_from([4.0, 8.0, 11.0, 16.0, 23.0, 32.0, 64.0]), ratios, max_size=7),
    st.floats(1.0, 200.0),
    st.integers(1, 4),
    st.integers(1, 8),
)
def test_any_bounded_correction_keeps_the_model_physical(shapes, batches, w, nodes, gpn) -> None:  # type: ignore[no-untyped-def]
    prof = dataclasses.replace(_form(), correction=Correction(shapes, tuple(sorted(batches.items()))))
    shape = Shape(nodes, gpn)
    t = step_time(prof, w * shape.gpus, shape)
    assert np.isfinite(t) and t > 0
    for bigger_w in (w * 1.07, w * 2):
        assert t <= step_time(prof, bigger_w * shape.gpus, shape) * (1 + 1e-12)
    reference = t
    if shape == Shape(1, 1):  # larger shapes are held to the single GPU's time without its own factor
        own = shapes.get((1, 1), 1.0)
        reference = t / own * min(own, 1.0)
    for more in (Shape(nodes + 1, gpn), Shape(nodes, gpn + 1)):
        assert reference <= step_time(prof, w * more.gpus, more) * (1 + 1e-12)


def test_the_form_without_a_correction_is_unchanged() -> None:
    prof = _form()
    w, dn, g = np.array([8.0, 64.0]), np.array([1, 2]), np.array([4, 8])
    assert step_time(prof, 8 * 4, Shape(1, 4)) == pytest.approx(
        float(default_step_times(prof.coefficients, w, dn, g)[0])
    )


def _cv_error(rows: list[Sample], extra: list[Sample], key: str, with_correction: bool) -> float:
    """Mean throughput error over every value of ``key`` held out (leave-one-batch/shape-out)."""
    from hivebatch.qos.fitting import FITTERS, mape

    errs = []
    for held in sorted({getattr(s, key) for s in rows}):
        train = [s for s in rows + extra if getattr(s, key) != held]
        test = [s for s in rows if getattr(s, key) == held]
        prof = (
            fit_form("default", train)
            if with_correction
            else Profile("m", "g", "default", FITTERS["default"](train))
        )
        errs.extend([mape(prof, test)] * len(test))
    return float(np.mean(errs))


def test_on_real_measurements_the_correction_predicts_held_out_batches_and_shapes_better() -> None:
    """ResNet-50 on V100 (the measurements shipped with the tests): the per-shape factors carry to a
    held-out batch size and the per-batch factors to a held-out shape."""
    from pathlib import Path

    from hivebatch.qos import read_profile_csv

    here = Path(__file__).parent.parent / "fixtures" / "profiles" / "imagenet"
    rows = read_profile_csv(here / "placements-dgx.csv").samples
    extra = read_profile_csv(here / "scalability-dgx.csv").samples
    for key in ("local_batch", "shape"):
        alone = _cv_error(rows, extra, key, with_correction=False)
        corrected_error = _cv_error(rows, extra, key, with_correction=True)
        assert corrected_error < alone - 0.5, (key, alone, corrected_error)


def test_a_remembered_answer_is_the_same_and_cannot_be_changed_by_the_caller() -> None:
    from hivebatch.qos.perfmodel import throughput_grid

    prof = corrected(_form(), _rows(_form(), Shape(2, 2), 1.15, 64.0, 1.2))
    dn, g = np.array([1, 2, 2, 2]), np.array([4, 2, 4, 8])
    first = throughput_grid(prof, 256.0, dn, g)
    first[:] = -1.0
    again = throughput_grid(prof, 256.0, dn, g)
    assert (again > 0).all()
    fresh = corrected(_form(), _rows(_form(), Shape(2, 2), 1.15, 64.0, 1.2))
    assert again.tolist() == throughput_grid(fresh, 256.0, dn, g).tolist()
