"""Fitting: CSV parsing, synthetic data with known coefficients, and the real profile files."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from qos_helpers import PROFILE_DATA, simple_profile

from hivebatch.errors import HivebatchError
from hivebatch.qos import (
    Profile,
    Shape,
    fit_profile,
    mape,
    parse_profile_csv,
    predict_throughput,
    read_profile_csv,
)
from hivebatch.qos.fitting import (
    Sample,
    SampleSet,
    declared_traits,
    fit_default,
    fit_forms,
    fit_paper,
    split_holdout,
)
from hivebatch.qos.perfmodel import (
    DEFAULT_COEFFS,
    comm_penalty,
    default_step_times,
    single_gpu_throughput,
    step_time,
)

PLACEMENTS = """local_bsz,step_time,sync_time,placement
32,0.10,0.0,1
64,0.20,0.0,1
32,0.12,0.01,44
32,0.13,0.01,12
64,0.22,0.02,2
32,0.14,0.01,3321
"""

SCALABILITY = """local_bsz,step_time,sync_time,num_nodes,num_replicas
20.0,0.12,0.004,2,2
20.0,0.13,0.004,2,3
28.0,0.14,0.004,3,6
"""


def test_parse_placements_skips_and_counts_asymmetric() -> None:
    s = parse_profile_csv(PLACEMENTS, "p.csv")
    assert [x.shape for x in s.samples] == [Shape(1, 1), Shape(1, 1), Shape(2, 4), Shape(1, 2)]
    assert s.skipped_asymmetric == 2
    assert s.samples[2].throughput == pytest.approx(32 * 8 / 0.12)


def test_parse_scalability_symmetric_when_replicas_divide() -> None:
    s = parse_profile_csv(SCALABILITY, "s.csv")
    assert [x.shape for x in s.samples] == [Shape(2, 1), Shape(3, 2)]
    assert s.skipped_asymmetric == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "not a profile CSV"),
        ("local_bsz,step_time,sync_time,placement\nx,0.1,0,1\n", "local_bsz is not a number"),
        ("local_bsz,step_time,sync_time,placement\n8,0.1,0,1a\n", "placement must be digits"),
        ("local_bsz,step_time,sync_time,placement\n8,-0.1,0,1\n", "step_time > 0"),
        ("local_bsz,step_time,sync_time,num_nodes,num_replicas\n8,0.1,0,3,2\n", "num_nodes <= num_replicas"),
    ],
)
def test_parse_errors_are_one_line(text: str, message: str) -> None:
    with pytest.raises(HivebatchError, match=message):
        parse_profile_csv(text, "bad.csv")


def test_read_missing_file() -> None:
    with pytest.raises(HivebatchError, match="cannot read"):
        read_profile_csv("/nonexistent/placements-dgx.csv")


def _grid() -> list[tuple[Shape, float]]:
    shapes = [Shape(d, g) for d in (1, 2, 3) for g in (1, 2, 4, 8)]
    return [(s, w) for s in shapes for w in (8.0, 16.0, 32.0, 64.0, 128.0)]


def test_default_form_recovers_known_coefficients() -> None:
    truth = simple_profile(
        t0=0.02, t_w=0.001, t_sqrtw=0.002, s_multi=0.01, s_loggpn=0.004, s_gpn=0.001,
        s_lognode=0.03, s_lognode_gpn=0.002, s_w_multi=0.0001, s_w_multi_loggpn=0.00005, s_w_lognode=0.0002,
    )  # fmt: skip
    samples = [Sample(s, w, step_time(truth, w * s.gpus, s)) for s, w in _grid()]
    got = fit_default(samples)
    assert got["overlap"] == 0.0
    for k in DEFAULT_COEFFS:
        # the weak prior towards zero contention/sync terms leaves a bias well under 0.1%
        assert got[k] == pytest.approx(truth.coefficients[k], rel=1e-3, abs=1e-8), k


def test_default_form_recovers_the_overlap() -> None:
    # synchronisation hides behind half the computation: compute-bound at large batches
    truth = simple_profile(t0=0.01, t_w=0.001, s_multi=0.02, s_lognode=0.04, overlap=0.5)
    samples = [Sample(s, w, step_time(truth, w * s.gpus, s)) for s, w in _grid()]
    got = fit_default(samples)
    assert got["overlap"] == 0.5
    assert mape(Profile("x", "V100", "default", got), samples) < 0.5


def test_default_form_recovers_with_noise() -> None:
    truth = simple_profile(t0=0.05, t_w=0.002, s_multi=0.02, s_lognode=0.05)
    rng = np.random.default_rng(1)
    samples = [
        Sample(s, w, step_time(truth, w * s.gpus, s) * (1 + rng.normal(0, 0.01)))
        for s, w in _grid()
        for _ in range(3)
    ]
    got = fit_default(samples)
    assert got["t_w"] == pytest.approx(0.002, rel=0.05)
    assert got["s_lognode"] == pytest.approx(0.05, rel=0.1)
    assert mape(Profile("x", "V100", "default", got), samples) < 2.0


def test_default_form_minimises_the_throughput_error_not_the_step_time_error() -> None:
    # one GPU, a constant step time measured as 1 s three times and 2 s twice: the throughput
    # error Σ|T/T̂ − 1| is 2 at T̂ = 1 and falls to 1.5 at T̂ = 2, while the step-time error
    # Σ|T̂/T − 1| is smallest at T̂ = 1, where a fit of that error stays
    times = [(4.0, 1.0), (4.0, 1.0), (8.0, 1.0), (4.0, 2.0), (8.0, 2.0)]
    samples = [Sample(Shape(1, 1), w, t) for w, t in times]
    got = fit_default(samples, columns=("t0",))
    assert 1.3 < got["t0"] <= 2.0
    fitted = mape(Profile("x", "V100", "default", got), samples)
    assert fitted < mape(simple_profile(t0=1.0, overlap=0.0), samples) - 5.0


def test_paper_form_recovers_known_coefficients() -> None:
    k0, k1, k2, gamma, lam = 20.0, 3.0, -0.005, 0.4, 2.5
    samples = []
    for s, w in _grid():
        pr = (s.gpus - comm_penalty(gamma, lam, s)) * single_gpu_throughput(k0, k1, k2, w)
        samples.append(Sample(s, w, w * s.gpus / pr))
    got = fit_paper(samples)
    assert got["k0"] == pytest.approx(k0, rel=1e-6)
    assert got["k1"] == pytest.approx(k1, rel=1e-6)
    assert got["k2"] == pytest.approx(k2, rel=1e-6)
    assert got["gamma"] == pytest.approx(gamma, rel=1e-6)
    assert got["lambda"] == pytest.approx(lam, rel=1e-6)


def test_paper_form_needs_single_gpu_rows() -> None:
    samples = [Sample(Shape(1, 2), w, 0.1) for w in (8.0, 16.0, 32.0)]
    with pytest.raises(HivebatchError, match="single-GPU samples"):
        fit_paper(samples)
    # two single-GPU batch sizes: sPR is a line through them
    line = fit_paper([Sample(Shape(1, 1), 10.0, 0.1), Sample(Shape(1, 1), 20.0, 0.1)])
    assert (line["k0"], line["k1"], line["k2"]) == (pytest.approx(0, abs=1e-9), pytest.approx(10), 0)


def test_default_form_needs_two_batch_sizes() -> None:
    with pytest.raises(HivebatchError, match="two or more batch sizes"):
        fit_default([Sample(Shape(1, 1), 8.0, 0.1), Sample(Shape(1, 2), 8.0, 0.12)])


def test_single_gpu_only_fit_leaves_sync_terms_zero() -> None:
    samples = [Sample(Shape(1, 1), w, 0.01 + 0.001 * w) for w in (8.0, 16.0, 32.0, 64.0)]
    got = fit_default(samples)
    assert got["t_w"] == pytest.approx(0.001, rel=1e-3)
    assert all(abs(got[k]) < 1e-9 for k in DEFAULT_COEFFS if k.startswith("s_"))


def test_split_is_seeded_and_sized() -> None:
    samples = [Sample(Shape(1, 1), float(w), 0.1) for w in range(1, 101)]
    a_train, a_test = split_holdout(samples, 0.3, seed=7)
    b_train, b_test = split_holdout(samples, 0.3, seed=7)
    _, c_test = split_holdout(samples, 0.3, seed=8)
    assert (len(a_train), len(a_test)) == (70, 30)
    assert a_test == b_test and a_test != c_test
    assert not set(map(id, a_train)) & set(map(id, a_test))
    with pytest.raises(HivebatchError):
        split_holdout(samples, 1.5, 0)


def test_fit_profile_reports_holdout_and_refits_on_all() -> None:
    truth = simple_profile(t0=0.05, t_w=0.002, s_multi=0.02, s_lognode=0.05)
    rng = np.random.default_rng(2)
    samples = [Sample(s, w, step_time(truth, w * s.gpus, s) * (1 + rng.normal(0, 0.02))) for s, w in _grid()]
    res = fit_profile("toy", "V100", SampleSet(samples, 3, "t.csv"), holdout=0.3, seed=0)
    assert res.holdout_rows == 18
    assert res.profile.samples == 60
    assert res.profile.skipped_asymmetric == 3
    assert 0 < res.mape_holdout < 5
    assert res.profile.extra["local_batch_range"] == [8.0, 128.0]


# ---- the real profile files -------------------------------------------------------------

REAL_FILES = sorted(PROFILE_DATA.glob("*/placements-*.csv")) if PROFILE_DATA.is_dir() else []
needs_data = pytest.mark.skipif(not REAL_FILES, reason=f"profile measurements not found at {PROFILE_DATA}")


def _holdout(path, form: str) -> float:  # type: ignore[no-untyped-def]
    scal = path.with_name(path.name.replace("placements", "scalability"))
    res = fit_profile(
        "m",
        "g",
        read_profile_csv(path),
        read_profile_csv(scal) if scal.exists() else None,
        form=form,
        holdout=0.3,
        seed=0,
    )
    assert res.mape_holdout is not None
    return res.mape_holdout


@needs_data
def test_default_form_meets_the_bar_on_every_real_file() -> None:
    errors = {f"{p.parent.name}/{p.name}": _holdout(p, "default") for p in REAL_FILES}
    assert len(errors) == 10
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] <= 10.0, f"{worst}: {errors[worst]:.2f}%"
    assert statistics.median(errors.values()) <= 5.0, errors


@needs_data
def test_held_out_rows_of_a_three_batch_profile_are_all_answered() -> None:
    """Three batch sizes of a real file, 70/30 split: an unconstrained fit bent T(w') into a
    parabola that refused the held-out batch-725 row on 1x1 although 725 was profiled."""
    keep = {129.0, 182.0, 725.0}
    path = PROFILE_DATA / "cifar10" / "placements-dgx.csv"
    place = [s for s in read_profile_csv(path).samples if s.local_batch in keep]
    scal = [
        s for s in read_profile_csv(path.with_name("scalability-dgx.csv")).samples if s.local_batch in keep
    ]
    train, test = split_holdout(place, 0.3, seed=1)
    prof = Profile("cifar10", "V100", "default", fit_default(train + scal))
    assert any(s.local_batch == 725.0 and s.shape == Shape(1, 1) for s in test)
    for s in test:
        pr = predict_throughput(prof, s.local_batch * s.shape.gpus, s.shape)
        assert pr > 0
        assert abs(pr / s.throughput - 1) < 0.3, s
    assert mape(prof, test) < 10.0


@needs_data
def test_fits_of_every_real_file_answer_the_whole_shape_space_monotonically() -> None:
    """A fit on each real file, and on each file without its one-GPU rows (the shape a
    leave-one-shape-out split hides), predicts a positive step time for every local batch 1..1e5
    on every placement of a 64-node x 8-GPU cluster, never shorter for more GPUs or a bigger batch."""
    nodes, gpn = np.meshgrid(np.arange(1, 65), np.arange(1, 9), indexing="ij")
    for path in REAL_FILES:
        scal = path.with_name(path.name.replace("placements", "scalability"))
        rows = read_profile_csv(path).samples + (read_profile_csv(scal).samples if scal.exists() else [])
        for train in (rows, [s for s in rows if s.shape != Shape(1, 1)]):
            coef = fit_default(train)
            times = np.array(
                [
                    default_step_times(coef, np.full(nodes.shape, w), nodes, gpn)
                    for w in np.geomspace(1, 1e5, 11)
                ]
            )
            assert np.isfinite(times).all() and (times > 0).all(), path
            assert (np.diff(times, axis=0) >= 0).all(), path  # bigger local batch
            assert (np.diff(times, axis=1) >= 0).all(), path  # more nodes
            assert (np.diff(times, axis=2) >= 0).all(), path  # more GPUs per node


@needs_data
def test_paper_form_fits_every_real_file_and_is_worse() -> None:
    for p in REAL_FILES:
        paper = _holdout(p, "paper")
        assert 0 < paper < 100
        assert paper > _holdout(p, "default"), p


@needs_data
def test_real_file_asymmetric_rows_are_counted() -> None:
    s = read_profile_csv(PROFILE_DATA / "bert" / "placements-dgx.csv")
    # 44 placements × 5 batch sizes; 16 of the placements are symmetric
    assert len(s.samples) == 16 * 5
    assert s.skipped_asymmetric == 28 * 5


MULTI_GPU_ONLY = """local_bsz,step_time,sync_time,placement
32,0.12,0.01,2
64,0.22,0.02,2
32,0.13,0.01,4
64,0.24,0.02,4
32,0.15,0.01,44
64,0.26,0.02,44
"""


def test_fit_forms_reports_the_other_forms_failure_and_raises_the_chosen_ones() -> None:
    rows = parse_profile_csv(MULTI_GPU_ONLY)
    results, errors = fit_forms("toy", "V100", rows, None, "default")
    assert list(results) == ["default"] and results["default"].profile.form == "default"
    assert list(errors) == ["paper"] and "single-GPU samples" in errors["paper"]
    with pytest.raises(HivebatchError, match="single-GPU samples"):
        fit_forms("toy", "V100", rows, None, "paper")


def test_declared_traits_fill_only_what_is_not_given() -> None:
    known = [
        simple_profile(),
        Profile("other", "V100", "default", dict(simple_profile().coefficients), "rnn", 3.0),
    ]
    assert declared_traits(known, " TOY ", None, None) == ("cnn", 10.0)
    assert declared_traits(known, "toy", "transformer", 7.5) == ("transformer", 7.5)
    assert declared_traits(known, "new", None, None) == (None, None)
