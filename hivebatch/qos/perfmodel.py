"""Performance model: predicted throughput PR(t, s) and latency Lat(t, s) of a data-parallel task.

Two forms share one interface:

* ``default`` — per-iteration time. One step of a task with local batch w' on placement
  s = <d_node, d_gpn> computes for

      C(w', s) = t0 + t_w·w' + t_sqrtw·√w'
               + w'·([n>1]·(s_w_multi + s_w_multi_loggpn·log2 d_gpn) + s_w_lognode·log2 d_node)

  (the w'-terms are GPUs of one node and nodes contending for memory, PCIe and the network while
  computing) and synchronises gradients for

      S(s) = [n>1]·(s_multi + s_loggpn·log2 d_gpn + s_gpn·d_gpn) + log2(d_node)·(s_lognode + s_lognode_gpn·d_gpn)

  of which up to overlap·C hides behind the backward pass:

      T(w', s) = C + max(0, S − overlap·C),   0 <= overlap <= 1,

  and PR = w'·n / T. log2(d_node) grows the way ring all-reduce time does. With every
  coefficient >= 0 (the fit guarantees it) T is positive, non-decreasing in the local batch and in
  d_node and d_gpn, and the synchronisation cost is never negative: the model is physical
  everywhere in a cluster's shape space, not only where it was measured. A profile without an
  ``overlap`` coefficient is read in the older additive form T = C + S (coefficients of either sign).

* ``paper`` — the paper's formulas (5)-(8): sPR(w') = k0 + k1·w' + k2·w'²,
  Comm(s) = γ·(λ·(d_node−1)·d_gpn + (d_gpn−1)) / (n−1), PR = (n − Comm)·sPR(w').

Either way Lat(t, s) = w_bat·w_iter / PR(t, s) + v. Predictions outside the model's range (local
batch below one sample, a non-positive time or throughput) raise ModelRangeError instead of
returning a negative or infinite time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hivebatch.errors import HivebatchError
from hivebatch.qos.correction import Correction, knot_floors, running_max

FORMS = ("default", "paper")

DEFAULT_COEFFS: tuple[str, ...] = (
    "t0",
    "t_w",
    "t_sqrtw",
    "s_multi",
    "s_loggpn",
    "s_gpn",
    "s_lognode",
    "s_lognode_gpn",
    "s_w_multi",
    "s_w_multi_loggpn",
    "s_w_lognode",
)
# Columns of default_features by role: computation (hides synchronisation behind it) and synchronisation.
COMPUTE_COEFFS: tuple[str, ...] = ("t0", "t_w", "t_sqrtw", "s_w_multi", "s_w_multi_loggpn", "s_w_lognode")
SYNC_COEFFS: tuple[str, ...] = ("s_multi", "s_loggpn", "s_gpn", "s_lognode", "s_lognode_gpn")
OVERLAP = "overlap"
PAPER_COEFFS: tuple[str, ...] = ("k0", "k1", "k2", "gamma", "lambda")


class ModelRangeError(HivebatchError):
    """The performance model cannot answer for this batch and placement."""


@dataclass(frozen=True, order=True)
class Shape:
    """A symmetric placement: d_node nodes with d_gpn GPUs on each."""

    d_node: int
    d_gpn: int

    def __post_init__(self) -> None:
        if self.d_node < 1 or self.d_gpn < 1:
            raise ModelRangeError(
                f"placement {self.d_node}x{self.d_gpn}: nodes and GPUs per node must be >= 1"
            )

    @property
    def gpus(self) -> int:
        return self.d_node * self.d_gpn

    def __str__(self) -> str:
        return f"{self.d_node}x{self.d_gpn}"


@dataclass
class Profile:
    """Fitted coefficients of one model type on one GPU type."""

    name: str
    gpu_type: str
    form: str
    coefficients: dict[str, float]
    family: str | None = None
    params_m: float | None = None
    samples: int = 0
    skipped_asymmetric: int = 0
    mape_train: float | None = None
    mape_holdout: float | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # measured per-shape and per-batch factors on the form's step time (physical default form only)
    correction: Correction | None = None
    # step times asked one at a time, by (local batch, d_node, d_gpn), and what they were computed with
    _step_memo: dict[tuple[float, int, int], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _memo_of: tuple[Any, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise HivebatchError(
                f"profile {self.name}: unknown form {self.form!r} (use one of {', '.join(FORMS)})"
            )
        wanted = DEFAULT_COEFFS if self.form == "default" else PAPER_COEFFS
        missing = [k for k in wanted if k not in self.coefficients]
        if missing:
            raise HivebatchError(
                f"profile {self.name}/{self.gpu_type}: missing coefficients {', '.join(missing)}"
            )
        bad = [k for k in wanted if not math.isfinite(float(self.coefficients[k]))]
        if bad:
            raise HivebatchError(
                f"profile {self.name}/{self.gpu_type}: non-finite coefficients {', '.join(bad)}"
            )
        if self.physical:
            c = self.coefficients
            negative = [k for k in (*DEFAULT_COEFFS, OVERLAP) if not float(c[k]) >= 0]
            if negative or float(c[OVERLAP]) > 1 or not c["t0"] + c["t_w"] + c["t_sqrtw"] > 0:
                raise HivebatchError(
                    f"profile {self.name}/{self.gpu_type}: with an overlap coefficient every coefficient "
                    f"must be >= 0, overlap <= 1 and t0 + t_w + t_sqrtw > 0 (refit it with hivebatch model fit)"
                )
        if self.correction is not None and not self.physical:
            raise HivebatchError(
                f"profile {self.name}/{self.gpu_type}: a correction needs the default form with an overlap "
                f"coefficient (refit it with hivebatch model fit)"
            )

    @property
    def physical(self) -> bool:
        """Default form with overlap: positive and monotone by construction (see the module docstring)."""
        return self.form == "default" and OVERLAP in self.coefficients

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "gpu_type": self.gpu_type,
            "form": self.form,
            "coefficients": {k: float(v) for k, v in self.coefficients.items()},
            "family": self.family,
            "params_m": self.params_m,
            "samples": self.samples,
            "skipped_asymmetric": self.skipped_asymmetric,
            "mape_train": self.mape_train,
            "mape_holdout": self.mape_holdout,
            "source": self.source,
        }
        if self.correction is not None:
            d["correction"] = self.correction.to_dict()
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        known = {
            "name", "gpu_type", "form", "coefficients", "family", "params_m", "samples",
            "skipped_asymmetric", "mape_train", "mape_holdout", "source", "correction",
        }  # fmt: skip
        try:
            return cls(
                name=str(d["name"]),
                gpu_type=str(d["gpu_type"]),
                form=str(d.get("form", "default")),
                coefficients={str(k): float(v) for k, v in dict(d["coefficients"]).items()},
                family=d.get("family"),
                params_m=None if d.get("params_m") is None else float(d["params_m"]),
                samples=int(d.get("samples") or 0),
                skipped_asymmetric=int(d.get("skipped_asymmetric") or 0),
                mape_train=d.get("mape_train"),
                mape_holdout=d.get("mape_holdout"),
                source=str(d.get("source") or ""),
                extra={k: v for k, v in d.items() if k not in known},
                correction=Correction.from_dict(d["correction"]) if d.get("correction") else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HivebatchError(f"malformed profile entry {d.get('name', '?')!r}: {exc}") from None


def default_features(local_batch: np.ndarray, d_node: np.ndarray, d_gpn: np.ndarray) -> np.ndarray:
    """Design matrix of the default form, columns in DEFAULT_COEFFS order."""
    w = np.asarray(local_batch, dtype=float)
    dn = np.asarray(d_node, dtype=float)
    g = np.asarray(d_gpn, dtype=float)
    multi = (dn * g > 1).astype(float)
    lg = np.log2(g)
    ln = np.log2(dn)
    ones = np.ones_like(w)
    return np.stack(
        [ones, w, np.sqrt(w), multi, multi * lg, multi * g, ln, ln * g, w * multi, w * multi * lg, w * ln],
        axis=-1,
    )


def default_step_times(
    coefficients: dict[str, float], w: np.ndarray, d_node: np.ndarray, d_gpn: np.ndarray
) -> np.ndarray:
    """T(w', s) of the default form for arrays of local batches ``w`` and placements."""
    x = default_features(w, d_node, d_gpn)
    compute = x[..., _COMPUTE_COLS] @ np.array([coefficients[k] for k in COMPUTE_COEFFS])
    sync = x[..., _SYNC_COLS] @ np.array([coefficients[k] for k in SYNC_COEFFS])
    if OVERLAP not in coefficients:
        return np.asarray(compute + sync, dtype=float)
    return np.asarray(compute + np.maximum(0.0, sync - coefficients[OVERLAP] * compute), dtype=float)


_COMPUTE_COLS = [DEFAULT_COEFFS.index(k) for k in COMPUTE_COEFFS]
_SYNC_COLS = [DEFAULT_COEFFS.index(k) for k in SYNC_COEFFS]


def profile_step_times(profile: Profile, w: np.ndarray, d_node: np.ndarray, d_gpn: np.ndarray) -> np.ndarray:
    """T(w', s) of a default-form profile, with its measured correction when it has one.

    Corrected step time stays physical: positive, non-decreasing in the local batch (``running_max``)
    and in nodes and GPUs per node (``Correction.floor_grid``)."""
    c = profile.coefficients
    corr = profile.correction
    if corr is None:
        return default_step_times(c, w, d_node, d_gpn)
    out_shape = np.broadcast(w, d_node, d_gpn).shape
    wb, dn, g = (a.astype(float).ravel() for a in np.broadcast_arrays(w, d_node, d_gpn))
    plan = _plan(c, corr, dn, g)
    asked = wb.tobytes()
    known = plan.times.get(asked)
    if known is not None:
        return known.reshape(out_shape).copy()
    kx, ky = corr.batch_knots
    t = running_max(default_step_times(c, wb, dn, g), wb, kx, ky, plan.own_knots) * plan.own_ratio
    if plan.inside.any():
        pn, pg, _ = corr.floor_grid
        wide = np.broadcast_to(wb[:, None], plan.inside.shape).ravel()
        pnn = np.broadcast_to(pn[None, :], plan.inside.shape).ravel()
        pgg = np.broadcast_to(pg[None, :], plan.inside.shape).ravel()
        smaller = running_max(default_step_times(c, wide, pnn, pgg), wide, kx, ky, plan.grid_knots)
        smaller = smaller.reshape(plan.inside.shape) * plan.grid_ratio
        t = np.maximum(t, np.where(plan.inside, smaller, 0.0).max(axis=1))
    if len(plan.times) >= _ASKED_KEPT:
        plan.times.clear()
    plan.times[asked] = t
    return np.asarray(t.reshape(out_shape), dtype=float).copy()


# bounds on what a correction remembers: placement sets, and batches asked per set (at most
# 64 x 256 arrays of one float per placement)
_PLANS_KEPT = 64
_ASKED_KEPT = 256


@dataclass(frozen=True)
class _Plan:
    """What a corrected prediction needs that depends on the placements only, not on the batch."""

    own_knots: np.ndarray  # N x K: knot_floors of the form's step times at the batch knots, per placement
    own_ratio: np.ndarray  # N: each placement's shape factor
    inside: np.ndarray  # N x P: which grid shapes each placement contains
    grid_knots: np.ndarray  # (N·P) x K: the same for the grid shapes, repeated for every placement
    grid_ratio: np.ndarray  # P: the grid shapes' factors (the single GPU's capped at 1)
    times: dict[bytes, np.ndarray] = field(default_factory=dict)  # step times by local batches asked


def _plan(c: dict[str, float], corr: Correction, dn: np.ndarray, g: np.ndarray) -> _Plan:
    # policies ask about the same placements for batch after batch, and about the same batches round
    # after round: plan them once per profile, and keep what was asked
    key = (tuple(c.values()), dn.tobytes(), g.tobytes())
    memo = corr.memo
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    kx, ky = corr.batch_knots
    knots = np.exp(kx)
    pn, pg, grid_ratio = corr.floor_grid
    inside = (pn[None, :] <= dn[:, None]) & (pg[None, :] <= g[:, None])
    grid_at = default_step_times(c, *np.broadcast_arrays(knots[None, :], pn[:, None], pg[:, None]))
    own_at = default_step_times(c, *np.broadcast_arrays(knots[None, :], dn[:, None], g[:, None]))
    plan = _Plan(
        own_knots=knot_floors(own_at, ky),
        own_ratio=corr.shape_ratio(dn, g),
        inside=inside,
        grid_knots=np.tile(knot_floors(grid_at, ky), (len(dn), 1)),
        grid_ratio=grid_ratio,
    )
    if len(memo) >= _PLANS_KEPT:
        memo.clear()
    memo[key] = plan
    return plan


def comm_penalty(gamma: float, lam: float, shape: Shape) -> float:
    """Formula (8): average path length from one GPU to its n-1 peers, cross-node peers weighted by λ."""
    n = shape.gpus
    if n == 1:
        return 0.0
    return gamma * (lam * (shape.d_node - 1) * shape.d_gpn + (shape.d_gpn - 1)) / (n - 1)


def single_gpu_throughput(k0: float, k1: float, k2: float, local_batch: float) -> float:
    """Formula (7): sPR(w') = k0 + k1·w' + k2·w'²."""
    return k0 + k1 * local_batch + k2 * local_batch * local_batch


def local_batch(batch: float, shape: Shape) -> float:
    """Formula (6): w' = w_bat / n; below one sample per GPU the placement makes no sense."""
    if batch <= 0:
        raise ModelRangeError(f"batch size must be positive (got {batch:g})")
    w = batch / shape.gpus
    if w < 1:
        raise ModelRangeError(
            f"batch {batch:g} on {shape.gpus} GPUs gives a local batch of {w:.3g} (< 1 sample per GPU)"
        )
    return w


def step_time(profile: Profile, batch: float, shape: Shape) -> float:
    """Seconds per iteration of the global batch on ``shape``."""
    return batch / predict_throughput(profile, batch, shape)


_STEPS_KEPT = 4096


def _one_step_time(profile: Profile, w: float, shape: Shape) -> float:
    # a controller round asks the same few (batch, shape) pairs of a model for each of its thousands
    # of waiting jobs, cycle after cycle; numpy's cost on one-element arrays is most of an answer
    coeffs = tuple(profile.coefficients.values())
    if not profile._memo_of or profile._memo_of[0] is not profile.correction or profile._memo_of[1] != coeffs:
        profile._step_memo.clear()
        profile._memo_of = (profile.correction, coeffs)
    key = (w, shape.d_node, shape.d_gpn)
    t = profile._step_memo.get(key)
    if t is None:
        one = (np.array([w]), np.array([shape.d_node]), np.array([shape.d_gpn]))
        t = float(profile_step_times(profile, *one)[0])
        if len(profile._step_memo) >= _STEPS_KEPT:
            profile._step_memo.clear()
        profile._step_memo[key] = t
    return t


def predict_throughput(profile: Profile, batch: float, shape: Shape) -> float:
    """PR(t, s) in samples/s for global batch ``batch`` on ``shape``; raises ModelRangeError if <= 0."""
    w = local_batch(batch, shape)
    c = profile.coefficients
    if profile.form == "default":
        t = _one_step_time(profile, w, shape)
        if not t > 0:
            raise ModelRangeError(
                f"profile {profile.name}/{profile.gpu_type} predicts a non-positive step time for "
                f"batch {batch:g} on {shape} (outside the profiled range)"
            )
        pr = w * shape.gpus / t
    else:
        spr = single_gpu_throughput(c["k0"], c["k1"], c["k2"], w)
        pr = (shape.gpus - comm_penalty(c["gamma"], c["lambda"], shape)) * spr
    if not (pr > 0 and math.isfinite(pr)):
        raise ModelRangeError(
            f"profile {profile.name}/{profile.gpu_type} predicts throughput {pr:.3g} <= 0 for "
            f"batch {batch:g} on {shape} (outside the profiled range)"
        )
    return pr


def throughput_grid(profile: Profile, batch: float, d_node: np.ndarray, d_gpn: np.ndarray) -> np.ndarray:
    """PR for many placements at once (same formulas as predict_throughput); NaN where the model
    cannot answer (local batch < 1, non-positive time or throughput)."""
    dn = np.asarray(d_node, dtype=float)
    g = np.asarray(d_gpn, dtype=float)
    n = dn * g
    w = batch / n
    c = profile.coefficients
    with np.errstate(divide="ignore", invalid="ignore"):
        if profile.form == "default":
            t = profile_step_times(profile, w, dn, g)
            pr = np.where(t > 0, w * n / t, np.nan)
        else:
            spr = c["k0"] + c["k1"] * w + c["k2"] * w * w
            comm = np.where(
                n > 1, c["gamma"] * (c["lambda"] * (dn - 1) * g + (g - 1)) / np.maximum(n - 1, 1), 0.0
            )
            pr = (n - comm) * spr
    ok = (w >= 1) & np.isfinite(pr) & (pr > 0)
    return np.where(ok, pr, np.nan)


def latency(profile: Profile, batch: float, iters: float, shape: Shape, overhead_s: float = 0.0) -> float:
    """Formula (4): Lat(t, s) = w_bat·w_iter / PR(t, s) + v, in seconds."""
    if iters < 0:
        raise ModelRangeError(f"iterations must be >= 0 (got {iters:g})")
    if overhead_s < 0:
        raise ModelRangeError(f"start-up overhead must be >= 0 (got {overhead_s:g})")
    return batch * iters / predict_throughput(profile, batch, shape) + overhead_s


@dataclass(frozen=True)
class Prediction:
    """A throughput prediction with the range the true value is expected in, and why it is that wide."""

    throughput: float
    low: float
    high: float
    outside: tuple[str, ...]  # how the query lies outside the profiled range; empty inside it


def _profiled_limits(profile: Profile) -> tuple[float, float, int, int] | None:
    """(smallest, largest local batch, most nodes, most GPUs per node) measured, if the profile says."""
    rng = profile.extra.get("local_batch_range")
    shapes = profile.extra.get("shapes_profiled")
    if rng is None or not shapes:
        return None
    try:
        lo, hi = float(rng[0]), float(rng[1])
        dims = [str(s).split("x") for s in shapes]
        return lo, hi, max(int(d[0]) for d in dims), max(int(d[1]) for d in dims)
    except (TypeError, ValueError, IndexError, KeyError):
        return None


def predict_with_range(profile: Profile, batch: float, shape: Shape) -> Prediction:
    """Throughput with an uncertainty range.

    Inside the profiled batches and shapes the range is ± the profile's measured error (holdout,
    else training MAPE). Outside, the prediction is anchored at the nearest profiled point and
    bounded by physics: a larger local batch takes at least as long per step and no longer per
    sample; a smaller one the reverse; a larger shape synchronises at least as long as the largest
    profiled one and at most that time scaled by the GPU count (ring all-reduce latency).
    """
    pr = predict_throughput(profile, batch, shape)
    err = (profile.mape_holdout if profile.mape_holdout is not None else profile.mape_train) or 0.0
    w = batch / shape.gpus
    t = w * shape.gpus / pr
    t_lo = t_hi = t
    outside: list[str] = []
    limits = _profiled_limits(profile)
    if limits is not None:
        w_min, w_max, n_max, g_max = limits
        near = Shape(min(shape.d_node, n_max), min(shape.d_gpn, g_max))
        w_near = min(max(w, w_min), w_max)
        t_near = step_time(profile, w_near * near.gpus, near)
        sync_near = max(0.0, t_near - step_time(profile, w_near, Shape(1, 1)))
        t_lo, t_hi = t_near, t_near + sync_near * (shape.gpus / near.gpus - 1)
        if near != shape:
            outside.append(f"shape {shape} beyond the profiled {n_max} nodes x {g_max} GPUs")
        if w > w_max:
            t_hi *= w / w_max
            outside.append(f"local batch {w:g} above the profiled {w_max:g}")
        elif w < w_min:
            t_lo *= w / w_min
            outside.append(f"local batch {w:g} below the profiled {w_min:g}")
        t_lo, t_hi = min(t_lo, t), max(t_hi, t)
    factor = err / 100.0
    n = w * shape.gpus
    return Prediction(pr, n / (t_hi * (1 + factor)), n / (t_lo * max(1 - factor, 0.5)), tuple(outside))


@dataclass(frozen=True)
class Forecast:
    """The model's answer for one job on one placement: throughput with its range and, given a number
    of iterations, the latency including the start-up overhead."""

    profile: Profile
    batch: int
    shape: Shape
    prediction: Prediction
    iters: int | None
    overhead_s: float
    latency_s: float | None


def forecast(profile: Profile, batch: int, shape: Shape, iters: int | None, overhead_s: float) -> Forecast:
    pred = predict_with_range(profile, batch, shape)
    lat = latency(profile, batch, iters, shape, overhead_s) if iters is not None else None
    return Forecast(profile, batch, shape, pred, iters, overhead_s, lat)
