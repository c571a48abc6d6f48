"""Fitting performance-model coefficients from profile samples, and measuring how well they predict.

Profile CSV formats (one row per measurement):

* ``placements-*.csv``: ``local_bsz, step_time, sync_time, placement`` — placement digits are GPUs
  per node, one digit per node ("8" = one node x 8 GPUs, "44" = two nodes x 4); digits that differ
  ("12") are asymmetric, outside the model's space, and are skipped and counted.
* ``scalability-*.csv``: ``local_bsz, step_time, sync_time, num_nodes, num_replicas`` — symmetric when
  the replicas divide evenly over the nodes.

Both are least squares on relative error, because the quality measure is the mean absolute
percentage error (MAPE) of the throughput; the default form's fit is reweighted towards that
measure itself.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hivebatch.errors import HivebatchError
from hivebatch.qos import correction
from hivebatch.qos.nnls import nnls
from hivebatch.qos.perfmodel import (
    COMPUTE_COEFFS,
    DEFAULT_COEFFS,
    FORMS,
    OVERLAP,
    SYNC_COEFFS,
    ModelRangeError,
    Profile,
    Shape,
    default_features,
    default_step_times,
    predict_throughput,
)


@dataclass(frozen=True)
class Sample:
    """One measurement: local batch on a placement took ``step_time`` seconds per iteration."""

    shape: Shape
    local_batch: float
    step_time: float

    @property
    def throughput(self) -> float:
        return self.local_batch * self.shape.gpus / self.step_time


@dataclass
class SampleSet:
    samples: list[Sample]
    skipped_asymmetric: int = 0
    source: str = ""


@dataclass
class FitResult:
    profile: Profile
    mape_train: float
    mape_holdout: float | None
    train_rows: int
    holdout_rows: int


def _num(value: str, column: str, where: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise HivebatchError(f"{where}: column {column} is not a number: {value!r}") from None
    if not math.isfinite(x):
        raise HivebatchError(f"{where}: column {column} is not finite: {value!r}")
    return x


def parse_profile_csv(text: str, source: str = "<csv>") -> SampleSet:
    """Samples from either CSV format (recognised by its header)."""
    reader = csv.DictReader(io.StringIO(text))
    cols = set(reader.fieldnames or [])
    if not {"local_bsz", "step_time"} <= cols or not (
        {"placement"} <= cols or {"num_nodes", "num_replicas"} <= cols
    ):
        raise HivebatchError(
            f"{source}: not a profile CSV (need columns local_bsz, step_time and placement, "
            f"or num_nodes and num_replicas; found {', '.join(sorted(cols)) or 'none'})"
        )
    out: list[Sample] = []
    skipped = 0
    for lineno, row in enumerate(reader, start=2):
        where = f"{source} line {lineno}"
        if "placement" in cols:
            digits = (row.get("placement") or "").strip()
            if not digits.isdigit() or "0" in digits:
                raise HivebatchError(f"{where}: placement must be digits 1-9 (GPUs per node), got {digits!r}")
            if len(set(digits)) != 1:
                skipped += 1
                continue
            shape = Shape(len(digits), int(digits[0]))
        else:
            nodes = int(_num(row.get("num_nodes", ""), "num_nodes", where))
            replicas = int(_num(row.get("num_replicas", ""), "num_replicas", where))
            if nodes < 1 or replicas < nodes:
                raise HivebatchError(
                    f"{where}: need 1 <= num_nodes <= num_replicas (got {nodes}, {replicas})"
                )
            if replicas % nodes:
                skipped += 1
                continue
            shape = Shape(nodes, replicas // nodes)
        bsz = _num(row.get("local_bsz", ""), "local_bsz", where)
        t = _num(row.get("step_time", ""), "step_time", where)
        if bsz < 1 or t <= 0:
            raise HivebatchError(f"{where}: need local_bsz >= 1 and step_time > 0 (got {bsz:g}, {t:g})")
        out.append(Sample(shape, bsz, t))
    return SampleSet(out, skipped, source)


def read_profile_csv(path: str | Path) -> SampleSet:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise HivebatchError(f"cannot read {p}: {exc.strerror or exc}") from None
    return parse_profile_csv(text, source=p.name)


def split_holdout(samples: list[Sample], fraction: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    """Random split: (train, holdout) with round(fraction·N) rows held out."""
    if not 0 < fraction < 1:
        raise HivebatchError(f"--holdout must be between 0 and 1 (got {fraction:g})")
    order = np.random.default_rng(seed).permutation(len(samples))
    k = len(samples) - int(round(fraction * len(samples)))
    return [samples[i] for i in order[:k]], [samples[i] for i in order[k:]]


def mape(profile: Profile, samples: list[Sample]) -> float:
    """Mean absolute percentage error of predicted throughput, in percent.

    A row the model cannot answer (it predicts no positive throughput) counts as a 100% miss.
    """
    if not samples:
        raise HivebatchError("no samples to evaluate")
    errs = []
    for s in samples:
        try:
            pred = predict_throughput(profile, s.local_batch * s.shape.gpus, s.shape)
        except ModelRangeError:
            errs.append(1.0)
            continue
        errs.append(abs(pred / s.throughput - 1.0))
    return 100.0 * float(np.mean(errs))


def _weighted_lstsq(a: np.ndarray, y: np.ndarray, w: np.ndarray, ridge: float = 0.0) -> np.ndarray:
    """Least squares on weighted rows, columns scaled to unit max so wide batch ranges stay well conditioned."""
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    aw = a / scale * w[:, None]
    yw = y * w
    if ridge > 0:
        aw = np.vstack([aw, math.sqrt(ridge) * np.eye(a.shape[1])])
        yw = np.concatenate([yw, np.zeros(a.shape[1])])
    coef, *_ = np.linalg.lstsq(aw, yw, rcond=None)
    return np.asarray(coef / scale, dtype=float)


# Candidate overlap fractions; the fit keeps the one with the smallest relative error.
_OVERLAPS = tuple(i / 10 for i in range(11))
# Weight of the prior "no contention, no synchronisation cost unless the data show it": it decides
# between coefficients the samples cannot tell apart (e.g. a constant vs the [n>1] term when no
# one-GPU rows are present) and is too small to move a well-determined fit.
_PRIOR = 0.01
# The quality measure is the mean absolute relative error of the throughput, |T/T̂ − 1| for a
# measured step time T and a predicted T̂, so least squares is reweighted towards it (iteratively
# reweighted least squares): each round divides a row by the previous round's prediction T̂ (the
# error's denominator) and weights it by (T/T̂)/|T/T̂ − 1|, the |T/T̂ − 1| floored at 2%. The
# 1/|error| factor turns squares into absolute values, so a few noisy rows pull the fit less than
# squares would let them; the T/T̂ factor accounts for T̂ in the denominator (the gradient of
# |T − T̂|/T̂ is T/T̂ times that of |T − T̂|/T̂ with the denominator held fixed), so the rounds settle
# where the throughput error itself is smallest. The first round divides by T, T̂ not known yet.
_L1_ROUNDS = 6
_L1_FLOOR = 0.02


def fit_default(samples: list[Sample], columns: tuple[str, ...] | None = None) -> dict[str, float]:
    """Coefficients of the per-iteration time form, all >= 0; needs samples at 2+ batch sizes.

    Non-negative least squares on relative error for each candidate overlap, reweighted towards
    the mean absolute relative error of the throughput. The max() in the form makes the problem
    piecewise linear: each row is either compute-bound (T = C) or has exposed synchronisation
    (T = (1−overlap)·C + S); rows are reassigned and refitted until the assignment settles.
    ``columns`` restricts the fit to those coefficients (the others are 0), for small sample sets.
    """
    if len({s.local_batch for s in samples}) < 2:
        raise HivebatchError("fitting needs samples at two or more batch sizes")
    names = COMPUTE_COEFFS + SYNC_COEFFS
    free = np.array([k in (columns or DEFAULT_COEFFS) for k in names])
    x_all = default_features(
        np.array([s.local_batch for s in samples]),
        np.array([s.shape.d_node for s in samples]),
        np.array([s.shape.d_gpn for s in samples]),
    )
    compute = x_all[:, [DEFAULT_COEFFS.index(k) for k in COMPUTE_COEFFS]]
    sync = x_all[:, [DEFAULT_COEFFS.index(k) for k in SYNC_COEFFS]]
    t = np.array([s.step_time for s in samples])
    scale = np.abs(np.hstack([compute, sync])).max(axis=0)
    scale[(scale == 0) | ~free] = 1.0
    prior = np.zeros((len(names), len(names)))
    core = [names.index(k) for k in ("t0", "t_w", "t_sqrtw")]
    prior[np.diag_indices(len(names))] = _PRIOR * math.sqrt(len(samples))
    prior[core, core] = 0.0
    best: tuple[float, float, np.ndarray] | None = None
    for overlap in _OVERLAPS:
        exposed = np.ones(len(samples), dtype=bool)
        coef = np.zeros(len(names))
        weight = np.ones(len(samples))
        denominator = t
        for _ in range(_L1_ROUNDS):
            root = np.sqrt(weight)
            for _ in range(20):
                design = np.hstack(
                    [compute * np.where(exposed, 1 - overlap, 1.0)[:, None], sync * exposed[:, None]]
                )
                design[:, ~free] = 0.0
                rows = design / scale / denominator[:, None] * root[:, None]
                target = t / denominator * root
                coef = nnls(np.vstack([rows, prior]), np.concatenate([target, np.zeros(len(names))])) / scale
                c = compute @ coef[: len(COMPUTE_COEFFS)]
                now = sync @ coef[len(COMPUTE_COEFFS) :] > overlap * c
                if (now == exposed).all():
                    break
                exposed = now
            c = compute @ coef[: len(COMPUTE_COEFFS)]
            pred = c + np.maximum(0.0, sync @ coef[len(COMPUTE_COEFFS) :] - overlap * c)
            if not (pred > 0).all():
                break
            denominator = pred
            weight = (t / pred) / np.maximum(np.abs(t / pred - 1), _L1_FLOOR)
            weight /= weight.mean()
        err = float(np.mean(np.abs(t / pred - 1))) if (pred > 0).all() else math.inf
        if best is None or err < best[0]:
            best = (err, overlap, coef)
    assert best is not None
    out = {k: float(v) for k, v in zip(names, best[2], strict=True)}
    out = {k: out[k] for k in DEFAULT_COEFFS}
    out[OVERLAP] = best[1]
    return out


def fit_paper(samples: list[Sample]) -> dict[str, float]:
    """Formula (7) from single-GPU samples, then γ and γ·λ of formula (8) from multi-GPU samples."""
    single = [s for s in samples if s.shape.gpus == 1]
    distinct = len({s.local_batch for s in single})
    if distinct < 2:
        raise HivebatchError("the paper form needs single-GPU samples at two or more batch sizes")
    w = np.array([s.local_batch for s in single])
    y = np.array([s.throughput for s in single])
    # quadratic as in the paper; with only two batch sizes a line is all the data can say
    degree = 2 if distinct >= 3 else 1
    k = np.zeros(3)
    k[: degree + 1] = _weighted_lstsq(np.stack([w**i for i in range(degree + 1)], axis=1), y, 1.0 / y)
    coeffs = {"k0": float(k[0]), "k1": float(k[1]), "k2": float(k[2]), "gamma": 0.0, "lambda": 1.0}
    multi = [s for s in samples if s.shape.gpus > 1]
    rows, target = [], []
    for s in multi:
        spr = k[0] + k[1] * s.local_batch + k[2] * s.local_batch**2
        if spr <= 0:
            continue
        n = s.shape.gpus
        rows.append([(s.shape.d_gpn - 1) / (n - 1), (s.shape.d_node - 1) * s.shape.d_gpn / (n - 1)])
        target.append(n - s.throughput / spr)
    if rows:
        a = np.array(rows)
        c, *_ = np.linalg.lstsq(a, np.array(target), rcond=None)
        intra, inter = float(c[0]), float(c[1])
        if a[:, 0].any() or a[:, 1].any():
            # Comm = γ·(g−1)/(n−1) + γλ·(d_node−1)g/(n−1); with no intra-node rows γ is unknown, so
            # the cross-node weight alone carries the penalty (γ := γλ, λ := 1).
            if abs(intra) > 1e-12 and a[:, 0].any():
                coeffs["gamma"], coeffs["lambda"] = intra, inter / intra
            else:
                coeffs["gamma"], coeffs["lambda"] = inter, 1.0
    return coeffs


FITTERS = {"default": fit_default, "paper": fit_paper}


def corrected(profile: Profile, samples: list[Sample]) -> Profile:
    """``profile`` with the correction its form leaves in ``samples`` (physical default form only)."""
    if not profile.physical or not samples:
        return profile
    t = default_step_times(
        profile.coefficients,
        np.array([s.local_batch for s in samples]),
        np.array([s.shape.d_node for s in samples]),
        np.array([s.shape.d_gpn for s in samples]),
    )
    ratios = np.array([s.step_time for s in samples]) / t
    profile.correction = correction.learn(
        [(s.shape.d_node, s.shape.d_gpn) for s in samples], [s.local_batch for s in samples], ratios
    )
    return profile


def fit_form(form: str, samples: list[Sample], name: str = "m", gpu_type: str = "g") -> Profile:
    """A profile of ``form`` fitted to ``samples``, corrected where the form allows it."""
    return corrected(Profile(name, gpu_type, form, FITTERS[form](samples)), samples)


def fit_profile(
    name: str,
    gpu_type: str,
    placements: SampleSet,
    extra: SampleSet | None = None,
    form: str = "default",
    holdout: float | None = None,
    seed: int = 0,
    family: str | None = None,
    params_m: float | None = None,
) -> FitResult:
    """Fit ``form``; with ``holdout`` evaluate a fit on the rest first, then refit on all rows.

    Rows of ``extra`` (a scalability file) always go into the training set: the holdout measures
    prediction of placements-file rows, as the quality bar is stated per placements file.
    """
    if form not in FITTERS:
        raise HivebatchError(f"unknown form {form!r} (use default or paper)")
    fitter = FITTERS[form]
    base = list(placements.samples)
    more = list(extra.samples) if extra else []
    if not base:
        raise HivebatchError(f"{placements.source}: no symmetric samples to fit")
    skipped = placements.skipped_asymmetric + (extra.skipped_asymmetric if extra else 0)
    mape_holdout: float | None = None
    holdout_rows = 0
    if holdout is not None:
        train, test = split_holdout(base, holdout, seed)
        if not test:
            raise HivebatchError(f"--holdout {holdout:g} leaves no rows to test on ({len(base)} samples)")
        trial = fit_form(form, train + more, name, gpu_type)
        mape_holdout = mape(trial, test)
        holdout_rows = len(test)
    everything = base + more
    profile = Profile(
        name=name,
        gpu_type=gpu_type,
        form=form,
        coefficients=fitter(everything),
        family=family,
        params_m=params_m,
        samples=len(everything),
        skipped_asymmetric=skipped,
        source=", ".join(s.source for s in (placements, extra) if s is not None and s.source),
    )
    corrected(profile, everything)
    batches = [s.local_batch for s in everything]
    profile.extra["local_batch_range"] = [min(batches), max(batches)]
    profile.extra["shapes_profiled"] = sorted({str(s.shape) for s in everything})
    profile.mape_train = round(mape(profile, everything), 3)
    profile.mape_holdout = None if mape_holdout is None else round(mape_holdout, 3)
    return FitResult(
        profile, profile.mape_train, profile.mape_holdout, len(everything) - holdout_rows, holdout_rows
    )


def fit_forms(
    name: str,
    gpu_type: str,
    placements: SampleSet,
    extra: SampleSet | None,
    form: str,
    holdout: float | None = None,
    seed: int = 0,
    family: str | None = None,
    params_m: float | None = None,
) -> tuple[dict[str, FitResult], dict[str, str]]:
    """Every model form fitted, so their errors can be compared: (fits by form, why another form failed).

    A failure of ``form`` itself, the one to store, is raised."""
    results: dict[str, FitResult] = {}
    errors: dict[str, str] = {}
    for f in FORMS:
        try:
            results[f] = fit_profile(
                name,
                gpu_type,
                placements,
                extra,
                form=f,
                holdout=holdout,
                seed=seed,
                family=family,
                params_m=params_m,
            )
        except HivebatchError as exc:
            if f == form:
                raise
            errors[f] = str(exc)
    return results, errors


def declared_traits(
    known: Iterable[Profile], name: str, family: str | None, params_m: float | None
) -> tuple[str | None, float | None]:
    """(family, params_m): what is given, else what stored profiles of ``name`` already declare, so a refit
    keeps them unless told otherwise."""
    for prof in known:
        if prof.name.lower() == name.strip().lower():
            family = family or prof.family
            params_m = params_m or prof.params_m
    return family, params_m
