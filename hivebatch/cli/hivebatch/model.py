"""``hivebatch model fit|predict|list``: fit performance profiles, ask the model, list what is stored."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hivebatch.cli.common import FINITE, config_option, options
from hivebatch.errors import ConfigError, HivebatchError

if TYPE_CHECKING:  # at run time imported where used, so --help does not load numpy
    from hivebatch.qos.correction import Correction
    from hivebatch.qos.fitting import FitResult
    from hivebatch.qos.perfmodel import Forecast

PROFILES_ENV = "HIVEBATCH_PROFILES"
CLUSTER_GPU = {"dgx": "V100", "rtx": "RTX2080Ti"}

profiles_option = click.option(
    "--profiles",
    "profiles",
    metavar="FILE",
    help="profile store file (default: $HIVEBATCH_PROFILES, else qos.profiles of the config, else the user data dir)",
)


def _qos_settings(config: str | None) -> Any:
    """The qos: section if a config can be found; None when there is none (model commands work without one)."""
    from hivebatch.config import load_config
    from hivebatch.qos.config import parse_qos_config

    try:
        path, data = load_config(config)
    except ConfigError:
        if config:
            raise
        return None
    return parse_qos_config(data, path.parent)


def resolve_store_path(explicit: str | None, config: str | None = None) -> Path:
    """Where site-fitted profiles live: --profiles, $HIVEBATCH_PROFILES, config qos.profiles, user data dir."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(PROFILES_ENV)
    if env:
        return Path(env)
    settings = _qos_settings(config)
    if settings is not None and settings.profiles is not None:
        return Path(settings.profiles)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hivebatch" / "profiles.json"


def _cluster_limits(config: str | None) -> tuple[int, int, list[str]] | None:
    """(nodes, most GPUs on one node, GPU types) of the configured cluster, or None without a usable config."""
    from hivebatch.config import load_config

    try:
        from hivebatch.cells import parse_cluster_config

        _, data = load_config(config)
        spec = parse_cluster_config(data)
        return len(spec.nodes), max(spec.gpus_per_node(t) for t in spec.gpu_types), list(spec.gpu_types)
    except (HivebatchError, ImportError, AttributeError, ValueError, KeyError):
        return None


def _gpu_type_from(path: str) -> str | None:
    stem = Path(path).stem  # placements-dgx -> dgx
    cluster = stem.rsplit("-", 1)[-1] if "-" in stem else ""
    return CLUSTER_GPU.get(cluster)


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}%"


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*headers, box=None, pad_edge=False)
        for r in rows:
            table.add_row(*r)
        Console().print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    for r in [headers, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


@click.group()
def model() -> None:
    """Performance profiles of model types: fit from measurements, predict, list."""


#: how to fit: the GPU measured, the form stored, the holdout, what is known of the model
_FIT_OPTIONS = (
    click.option(
        "--gpu-type", help="GPU type the samples were measured on (default: from a -dgx/-rtx file name)"
    ),
    click.option(
        "--form",
        type=click.Choice(["default", "paper"]),
        default="default",
        show_default=True,
        help="performance-model form to store",
    ),
    click.option(
        "--holdout",
        type=FINITE,
        help="fraction of the placements rows held out to measure prediction error (e.g. 0.3)",
    ),
    click.option("--seed", type=int, default=0, show_default=True, help="seed of the random holdout split"),
    click.option("--family", help="model family for similarity fallback (cnn, rnn, transformer, ...)"),
    click.option("--params-m", type=FINITE, help="parameter count in millions, for similarity fallback"),
    click.option("--dry-run", is_flag=True, help="fit and report, store nothing"),
)


@model.command()
@click.argument("placements", type=click.Path(dir_okay=False))
@click.argument("scalability", required=False, type=click.Path(dir_okay=False))
@click.option("--name", required=True, help="model type to store the profile under (e.g. resnet50)")
@options(*_FIT_OPTIONS)
@profiles_option
@config_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def fit(
    placements: str,
    scalability: str | None,
    name: str,
    gpu_type: str | None,
    form: str,
    holdout: float | None,
    seed: int,
    family: str | None,
    params_m: float | None,
    dry_run: bool,
    profiles: str | None,
    config: str | None,
    as_json: bool,
) -> None:
    """Fit a profile from PLACEMENTS.csv [SCALABILITY.csv] and store it under --name.

    Reports the error of both model forms so they can be compared; with --holdout the error is
    measured on held-out rows, and the stored coefficients are then refitted on all rows.
    """
    from hivebatch.qos.fitting import declared_traits, fit_forms, read_profile_csv
    from hivebatch.qos.store import ProfileStore

    gpu = _checked_fit_gpu(name, placements, gpu_type, holdout, params_m)
    store_path: Path | None = None
    if not dry_run:
        store_path = resolve_store_path(profiles, config)
        store = ProfileStore.load(store_path)
        family, params_m = declared_traits(store.profiles(), name, family, params_m)
    place = read_profile_csv(placements)
    scal = read_profile_csv(scalability) if scalability else None
    results, errors = fit_forms(
        name, gpu, place, scal, form, holdout=holdout, seed=seed, family=family, params_m=params_m
    )
    chosen = results[form]
    if not dry_run:
        store.put(chosen.profile)
        store.save()
    key = "mape_holdout" if holdout is not None else "mape_train"
    by_form = {f: getattr(r, key) for f, r in results.items()}
    if as_json:
        click.echo(json.dumps(_fit_json(chosen, holdout, seed, by_form, store_path), indent=1))
        return
    _echo_fit(chosen, holdout, seed, by_form, errors, store_path)


def _checked_fit_gpu(
    name: str, placements: str, gpu_type: str | None, holdout: float | None, params_m: float | None
) -> str:
    """The GPU type the samples were measured on, once --name, --holdout and --params-m are usable."""
    if not name.strip():
        raise click.UsageError("--name must not be empty")
    gpu = gpu_type or _gpu_type_from(placements)
    if not gpu:
        raise click.UsageError("--gpu-type is required (cannot tell the GPU type from the file name)")
    if holdout is not None and not 0 < holdout < 1:
        raise click.UsageError("--holdout must be between 0 and 1, e.g. 0.3")
    if params_m is not None and params_m <= 0:
        raise click.UsageError("--params-m must be > 0")
    return gpu


def _fit_json(
    chosen: FitResult,
    holdout: float | None,
    seed: int,
    by_form: dict[str, float | None],
    store_path: Path | None,
) -> dict[str, Any]:
    prof = chosen.profile
    return {
        "name": prof.name,
        "gpu_type": prof.gpu_type,
        "form": prof.form,
        "samples": prof.samples,
        "skipped_asymmetric": prof.skipped_asymmetric,
        "coefficients": prof.coefficients,
        "correction": None if prof.correction is None else prof.correction.to_dict(),
        "mape_train": chosen.mape_train,
        **(
            {"mape_holdout": chosen.mape_holdout, "holdout_rows": chosen.holdout_rows, "seed": seed}
            if holdout is not None
            else {}
        ),
        ("mape_holdout_by_form" if holdout is not None else "mape_train_by_form"): by_form,
        "store": None if store_path is None else str(store_path),
    }


def _echo_fit(
    chosen: FitResult,
    holdout: float | None,
    seed: int,
    by_form: dict[str, float | None],
    errors: dict[str, str],
    store_path: Path | None,
) -> None:
    prof = chosen.profile
    click.echo(
        f"fitted {prof.name} on {prof.gpu_type} (form {prof.form}) from {prof.samples} samples; "
        f"skipped {prof.skipped_asymmetric} asymmetric"
    )
    what = (
        f"holdout MAPE ({chosen.holdout_rows} held-out rows, seed {seed})"
        if holdout is not None
        else "train MAPE"
    )
    both = "  ".join(f"{f} {_fmt_pct(v)}" for f, v in by_form.items())
    click.echo(f"  {what}: {both}")
    for f, msg in errors.items():
        click.echo(f"  {f} form: not fitted: {msg}")
    if holdout is not None:
        click.echo(f"  train MAPE ({prof.form}, all rows): {_fmt_pct(chosen.mape_train)}")
    click.echo("  coefficients: " + " ".join(f"{k}={v:.6g}" for k, v in prof.coefficients.items()))
    if prof.correction is not None:
        click.echo(f"  measured correction on the form's step time: {_span(prof.correction)}")
    click.echo(f"  stored in {store_path}" if store_path else "  not stored (--dry-run)")


def _span(corr: Correction) -> str:
    parts = []
    for what, ratios in (
        ("shapes", list(corr.shapes.values())),
        ("batch sizes", [r for _, r in corr.batches]),
    ):
        if ratios:
            parts.append(f"{len(ratios)} {what} x{min(ratios):.2f}-{max(ratios):.2f}")
    return ", ".join(parts) or "none"


#: the placement asked about, the fallback when NAME has no profile, the start-up overhead
_PREDICT_OPTIONS = (
    click.option("--batch", type=int, required=True, help="global batch size (split evenly over the GPUs)"),
    click.option("--nodes", type=int, default=1, show_default=True, help="d_node: number of nodes"),
    click.option("--gpus-per-node", type=int, default=1, show_default=True, help="d_gpn: GPUs on each node"),
    click.option("--iters", type=int, help="iterations: also predict the latency Lat"),
    click.option(
        "--gpu-type", help="GPU type (default: the configured cluster's only type, else any profiled)"
    ),
    click.option("--like", help="use this model's profile when NAME has none"),
    click.option("--family", help="model family, for fallback when NAME has no profile"),
    click.option("--params-m", type=FINITE, help="parameter count in millions, for fallback"),
    click.option(
        "--overhead",
        type=FINITE,
        help="start-up overhead v in seconds (default: qos.startup_overhead_s, else 30)",
    ),
)


@model.command()
@click.option(
    "--name", required=True, help="model type (an unknown one borrows a similar profile, shown as a note)"
)
@options(*_PREDICT_OPTIONS)
@profiles_option
@config_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def predict(
    name: str,
    batch: int,
    nodes: int,
    gpus_per_node: int,
    iters: int | None,
    gpu_type: str | None,
    like: str | None,
    family: str | None,
    params_m: float | None,
    overhead: float | None,
    profiles: str | None,
    config: str | None,
    as_json: bool,
) -> None:
    """Predicted throughput PR (samples/s) and, with --iters, latency Lat for one placement."""
    from hivebatch.qos.perfmodel import Shape, forecast
    from hivebatch.qos.store import ProfileStore

    _check_predict_options(batch, nodes, gpus_per_node, iters, overhead)
    if overhead is None:
        settings = _qos_settings(config)
        overhead = settings.startup_overhead_s if settings is not None else 30.0
    gpu_type = _placement_gpu_type(nodes, gpus_per_node, gpu_type, config)
    store = ProfileStore.load(resolve_store_path(profiles, config))
    prof, note = store.get(name, gpu_type=gpu_type, like=like, family=family, params_m=params_m)
    fc = forecast(prof, batch, Shape(nodes, gpus_per_node), iters, overhead)
    if as_json:
        click.echo(json.dumps(_prediction_json(name, note, fc), indent=1))
        return
    if note:
        click.echo(f"note: {note}", err=True)
    _echo_prediction(fc)


def _check_predict_options(
    batch: int, nodes: int, gpus_per_node: int, iters: int | None, overhead: float | None
) -> None:
    if batch < 1:
        raise click.UsageError("--batch must be >= 1")
    if nodes < 1 or gpus_per_node < 1:
        raise click.UsageError("--nodes and --gpus-per-node must be >= 1")
    if iters is not None and iters < 0:
        raise click.UsageError("--iters must be >= 0")
    if overhead is not None and overhead < 0:
        raise click.UsageError("--overhead must be >= 0")


def _placement_gpu_type(
    nodes: int, gpus_per_node: int, gpu_type: str | None, config: str | None
) -> str | None:
    """--gpu-type, else the configured cluster's only GPU type; the placement must fit that cluster."""
    limits = _cluster_limits(config)
    if limits is not None and (nodes > limits[0] or gpus_per_node > limits[1]):
        raise HivebatchError(
            f"placement {nodes}x{gpus_per_node} does not fit the configured cluster "
            f"({limits[0]} nodes, at most {limits[1]} GPUs per node)"
        )
    if gpu_type is None and limits is not None and len(limits[2]) == 1:
        return limits[2][0]  # the cluster's only GPU type
    return gpu_type


def _prediction_json(name: str, note: str | None, fc: Forecast) -> dict[str, Any]:
    prof, batch, shape, pred = fc.profile, fc.batch, fc.shape, fc.prediction
    return {
        "name": name,
        "profile": prof.name,
        "gpu_type": prof.gpu_type,
        "form": prof.form,
        "note": note,
        "batch": batch,
        "nodes": shape.d_node,
        "gpus_per_node": shape.d_gpn,
        "local_batch": batch / shape.gpus,
        "throughput": pred.throughput,
        "throughput_low": pred.low,
        "throughput_high": pred.high,
        "outside_profiled": list(pred.outside),
        "step_time_s": batch / pred.throughput,
        "iters": fc.iters,
        "overhead_s": fc.overhead_s,
        "latency_s": fc.latency_s,
    }


def _echo_prediction(fc: Forecast) -> None:
    prof, batch, shape, pred = fc.profile, fc.batch, fc.shape, fc.prediction
    pr = pred.throughput
    click.echo(
        f"{prof.name}/{prof.gpu_type} batch {batch} on {shape} ({shape.gpus} GPU{'s' if shape.gpus != 1 else ''}, local batch {batch / shape.gpus:g}): "
        f"{pr:.1f} samples/s, {batch / pr:.4f} s/iteration"
    )
    click.echo(
        f"  expected range {pred.low:.1f}-{pred.high:.1f} samples/s"
        + (f" (extrapolated: {'; '.join(pred.outside)})" if pred.outside else " (within the profiled range)")
    )
    if fc.latency_s is not None:
        click.echo(
            f"latency for {fc.iters} iterations: {fc.latency_s:.1f} s (including {fc.overhead_s:g} s start-up)"
        )


@model.command(name="list")
@profiles_option
@config_option
@click.option("--json", "as_json", is_flag=True, help="print a JSON list")
def list_(profiles: str | None, config: str | None, as_json: bool) -> None:
    """The stored profiles: shipped defaults and site-fitted ones."""
    from hivebatch.qos.store import ProfileStore

    store = ProfileStore.load(resolve_store_path(profiles, config))
    items = store.profiles()
    if as_json:
        click.echo(
            json.dumps(
                [{**p.to_dict(), "origin": "local" if store.is_local(p) else "shipped"} for p in items],
                indent=1,
            )
        )
        return
    rows = [
        [
            p.name,
            p.gpu_type,
            p.form,
            p.family or "-",
            "-" if p.params_m is None else f"{p.params_m:g}M",
            str(p.samples) if p.samples else "-",
            _fmt_pct(p.mape_holdout),
            "local" if store.is_local(p) else "shipped",
            p.source.split(":")[0] if p.source else "-",
        ]
        for p in items
    ]
    _print_table(["MODEL", "GPU", "FORM", "FAMILY", "PARAMS", "SAMPLES", "HOLDOUT", "ORIGIN", "SOURCE"], rows)
