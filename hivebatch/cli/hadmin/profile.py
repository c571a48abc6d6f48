"""``hadmin profile run|collect``: measure a model on the cluster (the paper's offline evaluator).

``run`` copies the user's script into a run directory, submits one Slurm job (1 node, 1 GPU) that
runs it at each batch size, waits for it, fits the profile and stores it. ``collect`` does the fit
and store for a run directory whose job has finished (after ``run --no-wait``).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import click

from hivebatch.cli.common import FINITE, options
from hivebatch.errors import HivebatchError


def _default_gpu_type(config: str | None) -> str | None:
    """The cluster's GPU type when the config names exactly one."""
    from hivebatch.config import load_config

    try:
        _, data = load_config(config)
        from hivebatch.cells import parse_cluster_config

        types = parse_cluster_config(data).gpu_types
    except (HivebatchError, ImportError, AttributeError):
        return None
    return types[0] if len(types) == 1 else None


def _collect(run_dir: Path, profiles: str | None, config: str | None, as_json: bool) -> None:
    from hivebatch.cli.hivebatch.model import resolve_store_path
    from hivebatch.qos.profiling import fit_single_gpu, read_run, samples_csv
    from hivebatch.qos.store import ProfileStore, UnknownModelError

    meta_file = run_dir / "run.json"
    if not meta_file.exists():
        raise HivebatchError(f"{run_dir} is not a profiling run directory (no run.json)")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    sizes = [int(b) for b in meta["batch_sizes"]]
    result = read_run(run_dir, sizes)
    if len(result.samples) < 2:
        why = "; ".join(f"batch {b}: {r}" for b, r in result.dropped.items()) or "no output"
        raise HivebatchError(f"profiling run {run_dir} gave fewer than two usable batch sizes ({why})")
    (run_dir / f"placements-{meta['gpu_type']}.csv").write_text(samples_csv(result.samples), encoding="utf-8")
    store_path = resolve_store_path(profiles or meta.get("profiles"), config)
    store = ProfileStore.load(store_path)
    try:
        borrow, note = store.get(
            meta["model"],
            gpu_type=meta["gpu_type"],
            like=meta.get("like"),
            family=meta.get("family"),
            params_m=meta.get("params_m"),
        )
    except UnknownModelError:
        borrow, note = None, None
    prof = fit_single_gpu(
        meta["model"], meta["gpu_type"], result.samples, borrow, meta.get("family"), meta.get("params_m")
    )
    prof.extra["job_id"] = meta.get("job_id")
    prof.extra["measured_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    store.put(prof)
    store.save()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "name": prof.name,
                    "gpu_type": prof.gpu_type,
                    "form": prof.form,
                    "samples": prof.samples,
                    "dropped": {str(b): r for b, r in result.dropped.items()},
                    "coefficients": prof.coefficients,
                    "mape_train": prof.mape_train,
                    "source": prof.source,
                    "store": str(store_path),
                    "job_id": meta.get("job_id"),
                },
                indent=1,
            )
        )
        return
    for s in result.samples:
        click.echo(f"  batch {s.local_batch:g}: {s.throughput:.1f} samples/s ({s.step_time:.4f} s/iteration)")
    for b, r in result.dropped.items():
        click.echo(f"  batch {b}: dropped ({r})")
    if note and borrow is not None and borrow.name != prof.name:
        click.echo(f"  communication terms borrowed: {note}")
    click.echo(
        f"profile {prof.name}/{prof.gpu_type} fitted (train MAPE {prof.mape_train:.2f}%), stored in {store_path}"
    )


@click.group()
def profile() -> None:
    """Measure model types on the cluster and store their performance profiles."""


#: what to measure and how to run it
_MEASURE_OPTIONS = (
    click.option("--model", "model_name", required=True, help="model type to store the profile under"),
    click.option(
        "--script",
        "script",
        required=True,
        type=click.Path(exists=True, dir_okay=False),
        help="training script (see the interface in the docs)",
    ),
    click.option(
        "--batch-sizes",
        default="16,32,64,128",
        show_default=True,
        help="comma-separated batch sizes to measure",
    ),
    click.option("--iters", type=int, default=100, show_default=True, help="iterations per batch size"),
    click.option("--gpu-type", help="GPU type measured (default: the cluster's only GPU type)"),
    click.option(
        "--interpreter",
        help="command to run the script with (default: run it if executable, else python3 for .py, else bash)",
    ),
)

#: what is known about the model (for borrowing communication terms)
_MODEL_OPTIONS = (
    click.option("--like", help="similar known model whose communication terms to borrow"),
    click.option("--family", help="model family (cnn, rnn, transformer, ...)"),
    click.option("--params-m", type=FINITE, help="parameter count in millions"),
)

#: the Slurm job and the wait for it
_JOB_OPTIONS = (
    click.option("--account", help="Slurm account to charge"),
    click.option("--qos", "qos", help="Slurm QOS (e.g. opportunistic, to profile only on idle GPUs)"),
    click.option("--partition", help="Slurm partition"),
    click.option(
        "--time-limit", default="01:00:00", show_default=True, help="Slurm time limit of the profiling job"
    ),
    click.option(
        "--output-dir",
        type=click.Path(file_okay=False),
        help="run directory on a file system the nodes share (default: next to the profile store)",
    ),
    click.option(
        "--wait/--no-wait", default=True, show_default=True, help="wait for the job and store the profile"
    ),
    click.option(
        "--timeout", type=FINITE, default=3600, show_default=True, help="seconds to wait for the job"
    ),
    click.option("--poll", type=FINITE, default=2.0, hidden=True),
)

#: where the profile goes and how the result is printed
_STORE_OPTIONS = (
    click.option("--profiles", metavar="FILE", help="profile store file (default as for `hivebatch model`)"),
    click.option("--config", "config", metavar="FILE", help="hivebatch config"),
    click.option("--json", "as_json", is_flag=True, help="print one JSON object"),
)


@profile.command()
@options(*_MEASURE_OPTIONS, *_MODEL_OPTIONS, *_JOB_OPTIONS, *_STORE_OPTIONS)
def run(
    model_name: str,
    script: str,
    batch_sizes: str,
    iters: int,
    gpu_type: str | None,
    interpreter: str | None,
    like: str | None,
    family: str | None,
    params_m: float | None,
    account: str | None,
    qos: str | None,
    partition: str | None,
    time_limit: str,
    output_dir: str | None,
    wait: bool,
    timeout: float,
    poll: float,
    profiles: str | None,
    config: str | None,
    as_json: bool,
) -> None:
    """Submit a job that runs SCRIPT at each batch size on one GPU, then fit and store the profile."""
    from hivebatch.cli.hivebatch.model import resolve_store_path
    from hivebatch.profiling_job import make_run_dir, prepare_run, wait_for_job, write_json
    from hivebatch.qos.profiling import check_model_name, parse_batch_sizes, sbatch_args
    from hivebatch.slurm import get_backend

    check_model_name(model_name)
    sizes = parse_batch_sizes(batch_sizes)
    gpu = _checked_gpu_type(iters, params_m, gpu_type, config)
    store_path = resolve_store_path(profiles, config)
    run_dir = make_run_dir(Path(output_dir) if output_dir else store_path.parent / "profile-runs", model_name)
    meta: dict[str, Any] = {
        "model": model_name,
        "gpu_type": gpu,
        "batch_sizes": sizes,
        "iters": iters,
        "like": like,
        "family": family,
        "params_m": params_m,
        "profiles": str(store_path),
        "job_id": None,
    }
    text = prepare_run(run_dir, Path(script), interpreter, sizes, iters, meta)
    be = get_backend()
    job_id = be.submit(text, sbatch_args(model_name, time_limit, run_dir, account, qos, partition))
    meta["job_id"] = job_id
    write_json(run_dir / "run.json", meta)
    if not as_json:
        click.echo(
            f"submitted profiling job {job_id} for {model_name} on {gpu} (batch sizes {', '.join(map(str, sizes))}; run directory {run_dir})"
        )
    if not wait:
        _echo_collect_later(job_id, run_dir, as_json)
        return
    state = wait_for_job(be, job_id, timeout, poll, run_dir)
    if state not in ("DONE", "COMPLETED") and not as_json:
        click.echo(f"job {job_id} ended {state}; collecting what it measured")
    _collect(run_dir, profiles, config, as_json)


def _checked_gpu_type(iters: int, params_m: float | None, gpu_type: str | None, config: str | None) -> str:
    """The GPU type measured, once --iters and --params-m are known to be usable."""
    if iters < 1:
        raise click.UsageError("--iters must be >= 1")
    if params_m is not None and params_m <= 0:
        raise click.UsageError("--params-m must be > 0")
    gpu = gpu_type or _default_gpu_type(config)
    if not gpu:
        raise click.UsageError("--gpu-type is required (the config does not name exactly one GPU type)")
    return gpu


def _echo_collect_later(job_id: int, run_dir: Path, as_json: bool) -> None:
    """How to store the profile once a job submitted with --no-wait has finished."""
    if as_json:
        click.echo(
            json.dumps(
                {
                    "job_id": job_id,
                    "run_dir": str(run_dir),
                    "collect": f"hadmin profile collect {run_dir}",
                }
            )
        )
    else:
        click.echo(f"when it has finished: hadmin profile collect {run_dir}")


@profile.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--profiles", metavar="FILE", help="profile store file (default: the one the run was started for)"
)
@click.option("--config", "config", metavar="FILE", help="hivebatch config")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def collect(run_dir: str, profiles: str | None, config: str | None, as_json: bool) -> None:
    """Fit and store the profile measured by a finished profiling run in RUN_DIR."""
    _collect(Path(run_dir), profiles, config, as_json)
