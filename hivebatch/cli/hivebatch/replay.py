"""``hivebatch replay``: a trace slice on a live Slurm, plain and through hivebatch, beside the simulator."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hivebatch.cli.common import FINITE, FiniteFloat, options
from hivebatch.errors import HivebatchError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hivebatch.replay.find import Candidate, Scan
    from hivebatch.replay.plan import SliceSpec
    from hivebatch.sim.metrics import RunSummary
    from hivebatch.sim.workload import SimJob

_SLICE_OPTIONS = (
    click.option("--trace", required=True, type=click.Path(dir_okay=False), help="Trace file to replay."),
    click.option(
        "--trace-format", required=True, type=click.Choice(["philly", "tiresias", "sacct"]), help="Format of --trace."
    ),
    click.option(
        "--vcs",
        "vcs_file",
        type=click.Path(dir_okay=False),
        help="vc,nodes CSV of the trace's own VCs (Philly); their jobs are mapped onto the config's VCs.",
    ),
    click.option("--start", "start_h", type=FINITE, default=0.0, show_default=True,
                 help="Start of the slice, trace hours after the trace's first arrival."),
    click.option("--hours", type=FINITE, default=1.0, show_default=True, help="Length of the slice's arrival window, trace hours."),
    click.option("--max-jobs", type=int, help="Replay only the slice's first N jobs."),
    click.option("--alone", metavar="VC",
                 help="Replay only this VC's jobs of the slice, at the same times: its private cluster, measured "
                      "on Slurm (the simulator's baseline for its excess wait)."),
    click.option("--speedup", type=FINITE, default=8.0, show_default=True, help="Trace seconds per real second."),
    click.option("--min-run", type=FINITE, default=3.0, show_default=True, help="Shortest run, real seconds."),
    click.option("--max-run", type=FINITE, default=60.0, show_default=True, help="Longest run, real seconds (longer jobs are cut)."),
)  # fmt: skip

_RUN_OPTIONS = (
    click.option(
        "--config",
        type=click.Path(dir_okay=False),
        help="The cluster's hivebatch config (default: $HIVEBATCH_CONFIG).",
    ),
    click.option(
        "--mode",
        type=click.Choice(["plain", "hivebatch", "both", "sim", "find"]),
        default="both",
        show_default=True,
        help="Replay on plain Slurm, through hivebatch, both, or only print the simulator's prediction; "
        "find: scan the trace for slices worth replaying (--until, --step, --budget).",
    ),
    click.option("--operator", default="hbctl", show_default=True, help="The controller's user (a Slurm Operator)."),
    click.option("--user", "users", multiple=True, metavar="VC=USER", help="Who submits a VC's jobs in hivebatch mode (repeatable)."),
    click.option("--interval", type=FINITE, default=2.0, show_default=True, help="Controller cycle period, real seconds."),
    click.option("--start-latency", type=FiniteFloat(min=0), default=0.8, show_default=True,
                 help="For the simulator: real seconds from the controller's release of a placed job to Slurm's "
                      "start of it (0.6-0.9 s on average on the lab, from slurmctld's log)."),
    click.option("--phases", type=click.IntRange(min=0), default=16, show_default=True,
                 help="Also predict hivebatch with the controller's cycles at this many phases relative to the "
                      "submissions, and show the range (0: only the first)."),
    click.option("--policy", help="The controller's policy (default: the config's controller.policy, else qos)."),
    click.option("--plain-policy", default="tetris-perf", show_default=True,
                 help="Simulator policy predicting plain Slurm (tetris-perf: arrival order, later jobs fill gaps, as backfill does)."),
    click.option("--timeout", type=FINITE, default=1800.0, show_default=True, help="Give up on a replay after this many real seconds."),
    click.option("--keep", type=click.Path(file_okay=False, path_type=Path),
                 help="Keep the hivebatch run's ledger and config in this new directory, to read the "
                      "controller's decisions afterwards (hadmin events --config DIR/hivebatch.yaml)."),
    click.option("--json", "as_json", is_flag=True, help="One JSON object with every figure."),
    click.option("--until", "until_h", type=FINITE, help="--mode find: scan slices starting up to this trace hour (default: the trace's end)."),
    click.option("--step", "step_h", type=FINITE, default=1.0, show_default=True, help="--mode find: trace hours between the slices' starts."),
    click.option("--budget", type=FINITE, default=900.0, show_default=True,
                 help="--mode find: real seconds each replay of a slice may take, waits included (as simulated)."),
)  # fmt: skip


def _users(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        vc, sep, user = v.partition("=")
        if not sep or not vc or not user:
            raise click.UsageError(f"--user {v!r}: use VC=USER, e.g. --user cv=alice")
        out[vc] = user
    return out


def _requeue_trace_s(mode: str, speedup: float) -> float:
    """Trace seconds before a job hivebatch preempted may start again, read from the live slurmctld."""
    from hivebatch.replay import live

    if mode == "plain":
        return 0.0  # plain Slurm preempts nothing
    delay_s, source = live.requeue_delay()
    click.echo(f"a preempted job may start again {delay_s} s after its requeue ({source})", err=True)
    return delay_s * speedup


@click.command("replay")
@options(*_SLICE_OPTIONS, *_RUN_OPTIONS)
def replay(
    trace: str,
    trace_format: str,
    vcs_file: str | None,
    start_h: float,
    hours: float,
    max_jobs: int | None,
    alone: str | None,
    speedup: float,
    min_run: float,
    max_run: float,
    config: str | None,
    mode: str,
    operator: str,
    users: tuple[str, ...],
    interval: float,
    start_latency: float,
    phases: int,
    policy: str | None,
    plain_policy: str,
    timeout: float,
    keep: Path | None,
    as_json: bool,
    until_h: float | None,
    step_h: float,
    budget: float,
) -> None:
    """Replay a trace slice into a live Slurm, time-compressed, with plain Slurm and through hivebatch.

    Each job sleeps its scaled run time. Per VC the excess wait over its private cluster and the QoS
    rate come from Slurm's accounting (sacct), beside the simulator's prediction for the same slice.
    Run as root on a Slurm with accounting; plain mode adds temporary accounts and removes them.

    \b
    Example (the lab):
      hivebatch replay --trace philly.csv --trace-format philly --vcs philly-vcs.csv \\
        --config etc/hivebatch.example.yaml --start 2273 --hours 2 --max-jobs 60 --speedup 8 \\
        --user cv=alice --user nlp=bob --user sys=carol
    """
    from hivebatch.config import read_yaml
    from hivebatch.qos import POLICY_NAMES, parse_qos_config
    from hivebatch.replay import compare, live
    from hivebatch.replay.find import find_slices
    from hivebatch.replay.measure import JobError, job_error, measured_records, summary_of
    from hivebatch.replay.plan import SliceSpec, plan_replay
    from hivebatch.replay.spread import Spread
    from hivebatch.sim import setup, traces
    from hivebatch.sim.workload import CLASSES

    cfg = config or os.environ.get("HIVEBATCH_CONFIG")
    if not cfg:
        raise click.UsageError("give --config FILE (the cluster's hivebatch config) or set HIVEBATCH_CONFIG")
    data: dict[str, Any] = read_yaml(cfg)
    policy = policy or str((data.get("controller") or {}).get("policy", "qos"))
    for p in (policy, plain_policy):
        if p not in POLICY_NAMES:
            raise click.UsageError(f"unknown policy {p!r}: use one of {', '.join(POLICY_NAMES)}")
    vc_users = _users(users)
    if keep is not None and mode not in ("hivebatch", "both"):
        raise click.BadParameter(
            f"only a hivebatch run has a ledger to keep, not --mode {mode}", param_hint="--keep"
        )
    if keep is not None and (keep.exists() or not keep.parent.is_dir()):
        why = "exists" if keep.exists() else "is not in an existing directory"
        raise click.BadParameter(f"{keep} {why}: give a new directory", param_hint="--keep")
    spec = setup.build_spec(data)
    vc_gpus = {vc: spec.vc_gpus(vc) for vc in spec.vcs}
    if alone is not None and mode not in ("hivebatch", "sim"):
        # alone under plain Slurm is the VC's GrpTRES on every node, not its private nodes: no baseline
        raise click.BadParameter(f"a VC alone is its private cluster only through hivebatch, not --mode {mode}: "
                                 "use --mode hivebatch (or sim)", param_hint="--alone")  # fmt: skip
    if alone is not None and alone not in vc_gpus:
        raise click.BadParameter(f"{alone!r} is not a VC of the config: use one of {', '.join(sorted(vc_gpus))}",
                                 param_hint="--alone")  # fmt: skip
    trace_vcs = {vc: 8 * n for vc, n in traces.read_vcs(vcs_file).items()} if vcs_file else vc_gpus
    jobs, report = traces.read_trace(trace_format, trace, trace_vcs)
    slice_spec = SliceSpec(start_h * 3600, hours * 3600, max_jobs, speedup, min_run, max_run)
    cfg_dir = Path(cfg).resolve().parent
    platform = setup.build_platform(spec, parse_qos_config(data, cfg_dir))
    if mode == "find":
        scan = _scan(jobs, slice_spec, until_h, step_h, budget)
        requeue_trace_s = _requeue_trace_s(mode, speedup)
        timing = (interval * speedup, requeue_trace_s, start_latency * speedup)
        limits = (platform.gpus_per_node, platform.max_nodes)
        _print_found(scan, find_slices(jobs, scan, data, cfg_dir, vc_gpus, limits, (plain_policy, policy), timing),
                     interval * speedup / 60, as_json)  # fmt: skip
        return
    plan = plan_replay(jobs, slice_spec, vc_gpus, platform.gpus_per_node, platform.max_nodes)
    if alone is not None:
        plan = plan.only_vc(alone)
    if not plan.jobs:
        whose = f"of VC {alone} " if alone is not None else ""
        raise HivebatchError(f"{trace}: no jobs {whose}in the slice ({report.summary()})")
    click.echo(plan.summary(), err=True)
    requeue_trace_s = _requeue_trace_s(mode, speedup)
    settings = live.LiveSettings(
        operator=operator,
        users=vc_users,
        classes=list(CLASSES),
        interval_s=interval,
        timeout_s=timeout,
        keep=None if keep is None else keep.resolve(),
        log=lambda m: click.echo(m, err=True),
    )
    if alone is not None:
        modes = ["hivebatch"]
    else:
        modes = ["plain", "hivebatch"] if mode in ("both", "sim") else [mode]
    results: dict[str, tuple[RunSummary | None, RunSummary]] = {}
    took: dict[str, float] = {}
    errors: dict[str, JobError | None] = {}
    spreads: dict[str, Spread | None] = {}
    for m in modes:
        pred = compare.predict(
            plan,
            data,
            cfg_dir,
            m,
            plain_policy if m == "plain" else policy,
            interval * speedup,
            requeue_trace_s,
            start_latency * speedup,
        )
        if m == "hivebatch" and phases:
            timing = (interval * speedup, requeue_trace_s, start_latency * speedup)
            spreads[m] = compare.phase_spread(plan, data, cfg_dir, policy, timing, phases, first=pred)
        if mode == "sim":
            results[m] = (None, pred.summary)
            continue
        click.echo(
            f"replaying {len(plan.jobs)} jobs on {m} Slurm (about {plan.wall_s:.0f} s or more)", err=True
        )
        started = time.monotonic()
        rows = (
            live.replay_plain(plan, vc_gpus, settings)
            if m == "plain"
            else live.replay_hivebatch(plan, data, settings)
        )
        measured = measured_records(pred.run, rows, plan, m)
        results[m] = (summary_of(pred.run, measured, m, pred.private), pred.summary)
        errors[m] = job_error(pred.run.records, measured)
        took[m] = time.monotonic() - started
        click.echo(f"{m}: {len(rows)} jobs in sacct after {took[m]:.0f} s", err=True)
    out = compare.comparison(results, interval * speedup, errors, spreads)
    for m, seconds in took.items():
        out["modes"][m]["replay_wall_s"] = round(seconds, 1)
    out["plan"] = {
        "jobs": len(plan.jobs),
        "wall_s": plan.wall_s,
        "summary": plan.summary(),
        "speedup": speedup,
    }
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(compare.format_table(out))


def _scan(jobs: list[SimJob], spec: SliceSpec, until_h: float | None, step_h: float, budget: float) -> Scan:
    """--mode find's windows: from the slice's start to --until (default: the trace's last arrival)."""
    from hivebatch.replay.find import Scan

    spec.check()
    if step_h <= 0 or budget <= 0:
        raise click.UsageError("--step and --budget must be > 0")
    last = max((j.arrival for j in jobs), default=0.0)
    return Scan(spec, step_h * 3600, last if until_h is None else until_h * 3600, budget)


def _print_found(scan: Scan, found: Iterable[Candidate], interval_min: float, as_json: bool) -> None:
    from hivebatch.replay.find import format_candidates

    kept = list(found)
    windows = max(0, math.ceil((scan.until_s - scan.spec.start_s) / scan.step_s))
    start_h = scan.spec.start_s / 3600
    click.echo(
        f"{windows} slices from {start_h:g} h, {len(kept)} fit {scan.budget_s:g} s and run whole", err=True
    )
    click.echo(json.dumps([c.to_json() for c in kept]) if as_json else format_candidates(kept, interval_min))
