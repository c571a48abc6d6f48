"""``hivebatch simulate``: replay a workload or trace through the real cell core and QoS policies."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hivebatch.cli.common import FINITE, options
from hivebatch.errors import HivebatchError

if TYPE_CHECKING:  # at run time imported where used, so --help does not load numpy
    from hivebatch.sim.metrics import RunSummary
    from hivebatch.sim.scaling import Scaling

# kept literal (not hivebatch.qos.POLICY_NAMES) so `--help` does not import numpy
POLICY_CHOICES = ("qos", "fifo", "capacity", "minmin", "wfs", "tetris-perf", "tetris-cer", "qos-paper", "all")


def _parse_bad_node(value: str) -> Any:
    from hivebatch.sim.engine import BadNode

    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise click.UsageError(f"--bad-node {value!r}: use NODE:START_S or NODE:START_S:END_S (seconds)")
    try:
        start = float(parts[1])
        end = float(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise click.UsageError(f"--bad-node {value!r}: START_S and END_S must be seconds") from None
    if end is not None and end <= start:
        raise click.UsageError(f"--bad-node {value!r}: END_S must be after START_S")
    return BadNode(parts[0], start, end)


def _load(
    workload: str | None,
    trace: str | None,
    trace_format: str | None,
    vcs_file: str | None,
    config: str | None,
    rate: float,
    hours: float,
    seed: int,
    n_jobs: int,
    opportunistic: float,
    single_vc: bool,
    target_load: float | None = None,
) -> tuple[dict[str, Any], Path | None, list[Any], str | None, Any]:
    """(config mapping, config dir, jobs, note on skipped trace jobs, scaling done for --target-load)."""
    from hivebatch.config import find_config_path, read_yaml
    from hivebatch.errors import ConfigError
    from hivebatch.sim import setup, traces
    from hivebatch.sim import workload as wl

    if (workload is None) == (trace is None):
        raise click.UsageError("give either --workload paper|synthetic or --trace FILE")
    vc_nodes = traces.read_vcs(vcs_file) if vcs_file else None
    if config:
        cfg_path: Path | None = Path(config)
        data = read_yaml(config)
    elif vc_nodes is not None:
        cfg_path, data = None, setup.node8_config(vc_nodes)
    elif workload is not None or trace_format == "tiresias":
        cfg_path = setup.paper_config_path()
        if not cfg_path.exists():
            raise HivebatchError(f"the paper's cluster config {cfg_path} is missing: pass --config FILE")
        data = read_yaml(cfg_path)
    else:  # the site's own history (sacct) replays on the site's own cluster, found as every command finds it
        try:
            cfg_path = find_config_path()
        except ConfigError as exc:
            raise click.UsageError(
                f"--trace-format {trace_format} needs --config FILE or --vcs FILE (vc,nodes)"
            ) from exc
        data = read_yaml(cfg_path)
    if single_vc:
        data = setup.single_vc_config(data)
    spec = setup.build_spec(data)
    vc_gpus = {vc: spec.vc_gpus(vc) for vc in spec.vcs}
    note = None
    if workload == "paper":
        if rate <= 0 or hours <= 0:
            raise click.UsageError("--rate and --hours must be > 0")
        jobs = wl.paper_workload(rate, hours, seed, vc_gpus, opportunistic)
    elif workload == "synthetic":
        if n_jobs < 1:
            raise click.UsageError("--jobs must be >= 1")
        jobs = wl.synthetic_trace(n_jobs, seed, vc_gpus)
    else:
        if trace_format is None:
            raise click.UsageError("--trace needs --trace-format philly|tiresias|sacct")
        assert trace is not None
        jobs, report = traces.read_trace(trace_format, trace, vc_gpus)
        note = report.summary()
        if not jobs:
            raise HivebatchError(f"{trace}: no usable jobs ({note})")
    scaling = None
    if target_load is not None:
        from hivebatch.sim.scaling import fit_vc_nodes

        if vc_nodes is None or config:
            raise click.UsageError("--target-load needs --vcs FILE (a cluster described by its VC sizes)")
        scaling = fit_vc_nodes(jobs, vc_nodes, target_load)
        data = setup.node8_config(scaling.vc_nodes())
        if single_vc:
            data = setup.single_vc_config(data)
    return data, cfg_path.parent if cfg_path else None, jobs, note, scaling


class _Progress:
    """A rich progress bar on stderr, shown only on a terminal and only for runs longer than a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None and self._progress.live.is_started:
            self._progress.stop()

    def factory(self, label: str, total: int) -> Callable[[int, int], None] | None:
        if self._progress is None:
            return None
        started = time.monotonic()
        state: dict[str, Any] = {"task": None, "last": 0.0}
        prog = self._progress

        def update(done: int, total_: int) -> None:
            now = time.monotonic()
            if now - state["last"] < 0.1 and done < total_:
                return
            state["last"] = now
            if state["task"] is None:
                if now - started < 1.0:
                    return
                if not prog.live.is_started:
                    prog.start()
                state["task"] = prog.add_task(label, total=total_)
            prog.update(state["task"], completed=done)
            if done >= total_:
                prog.remove_task(state["task"])

        return update


def _print_table(results: list[Any], as_rich: bool) -> None:
    cols = [
        "policy",
        "mode",
        "jobs",
        "QoS rate",
        "makespan h",
        "/bound",
        "avg JCT h",
        "avg queue h",
        "norm lat",
        "util",
    ]
    rows = [
        [
            r.policy,
            r.mode,
            str(r.completed) + (f" ({r.rejected} rej)" if r.rejected else ""),
            f"{100 * r.qos_rate:.1f}%",
            f"{r.makespan_s / 3600:.2f}",
            f"{r.makespan_ratio:.2f}",
            f"{r.avg_jct_s / 3600:.2f}",
            f"{r.avg_queue_s / 3600:.2f}",
            f"{r.avg_norm_latency:.2f}",
            f"{100 * r.utilization:.1f}%",
        ]
        for r in results
    ]
    vc_cols = ["policy", "mode", "VC", "jobs", "queue min", "private min", "excess min"]
    vc_rows = [
        [
            r.policy,
            r.mode,
            vc,
            str(int(e["jobs"])),
            f"{e['avg_queue_s'] / 60:.1f}",
            f"{e['private_avg_queue_s'] / 60:.1f}" if "private_avg_queue_s" in e else "-",
            f"{e['excess_queue_s'] / 60:+.1f}" if "excess_queue_s" in e else "-",
        ]
        for r in results
        for vc, e in r.vcs.items()
    ]
    if as_rich:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        for title, c, rs in (
            ("Policies", cols, rows),
            ("Queuing delay per VC vs its private cluster", vc_cols, vc_rows),
        ):
            table = Table(title=title)
            for i, name in enumerate(c):
                table.add_column(name, justify="left" if i < (3 if c is vc_cols else 2) else "right")
            for row in rs:
                table.add_row(*row)
            console.print(table)
    else:
        for c, rs in ((cols, rows), (vc_cols, vc_rows)):
            click.echo("\t".join(c))
            for row in rs:
                click.echo("\t".join(row))
            click.echo("")


def _simulate_inside_vc(
    workload: str, seed: int, hours: float, policy: str, starve_after_s: float, as_json: bool
) -> None:
    """Before/after of backfill reservations (starvation) or per-user fairshare (fairness) in one VC."""
    from hivebatch.sim import vc_compare

    if hours <= 0:
        raise click.UsageError("--hours must be > 0")
    if policy == "all":
        raise click.UsageError(f"--workload {workload} compares one policy with a rule off and on: name it")
    if workload == "starvation":
        figures = vc_compare.starvation(seed=seed, hours=hours, policy=policy, starve_after_s=starve_after_s)
    else:
        figures = vc_compare.fairness(seed=seed, hours=hours, policy=policy)
    if as_json:
        for f in figures:
            click.echo(
                json.dumps({**f.as_dict(), "seed": seed, "hours": hours, "policy": policy}, sort_keys=True)
            )
    else:
        click.echo(vc_compare.format_table(figures))


def _simulate_sharing(config: str | None, seed: int, hours: float, as_json: bool) -> None:
    """The GPU-sharing mix in its three modes (exclusive, binpack, colocate) on the lab cluster or --config."""
    from hivebatch.config import read_yaml
    from hivebatch.sim import sharing_mix

    data = read_yaml(config) if config else None
    results = sharing_mix.compare(seed, hours, data)
    if as_json:
        for r in results:
            click.echo(json.dumps({**r.as_dict(), "seed": seed, "hours": hours}, sort_keys=True))
    else:
        click.echo(sharing_mix.format_table(results))


#: what to replay: a generated workload or a trace
_WORKLOAD_OPTIONS = (
    click.option(
        "--workload",
        type=click.Choice(["paper", "synthetic", "sharing", "starvation", "fairness"]),
        help="Generate a workload: the QoS paper's, a large synthetic trace, or a mix of whole-GPU jobs and "
        "GPU slices (--gpu-mem) replayed without sharing, with binpacked slices and with co-location; "
        "starvation (1/2/8-GPU jobs in one VC) and fairness (a heavy and a light user in one VC) compare "
        "backfill reservations and fairshare off and on.",
    ),
    click.option(
        "--rate",
        type=FINITE,
        default=10.0,
        show_default=True,
        help="Paper workload: Poisson arrivals, jobs per hour.",
    ),
    click.option(
        "--hours",
        type=FINITE,
        default=24.0,
        show_default=True,
        help="Paper workload: arrival window in hours.",
    ),
    click.option(
        "--jobs",
        "n_jobs",
        type=int,
        default=10000,
        show_default=True,
        help="Synthetic workload: number of jobs.",
    ),
    click.option(
        "--seed", type=int, default=1, show_default=True, help="Random seed of the generated workload."
    ),
    click.option(
        "--trace", type=click.Path(dir_okay=False), help="Replay a trace file instead of generating jobs."
    ),
    click.option(
        "--trace-format", type=click.Choice(["philly", "tiresias", "sacct"]), help="Format of --trace."
    ),
    click.option(
        "--vcs",
        "vcs_file",
        type=click.Path(dir_okay=False),
        help="vc,nodes CSV: build a cluster of 8-GPU nodes, each VC owning its nodes.",
    ),
)

#: how to replay it: policy, sharing mode, cluster, faults
_REPLAY_OPTIONS = (
    click.option(
        "--policy",
        type=click.Choice(POLICY_CHOICES),
        default="qos",
        show_default=True,
        help="Scheduling policy to replay, or 'all' to compare every one (qos-paper: the paper's pure least-slack order).",
    ),
    click.option(
        "--mode",
        type=click.Choice(["cells", "quota", "both"]),
        default="cells",
        show_default=True,
        help="Sharing mode: HiveD cells or GPU-count quotas (GrpTRES).",
    ),
    click.option(
        "--config",
        type=click.Path(dir_okay=False),
        help="Cluster + VC + qos config (default: etc/paper-4x4.yaml; for a sacct trace the site's config: "
        "$HIVEBATCH_CONFIG, /etc/hivebatch/hivebatch.yaml, etc/hivebatch.yaml).",
    ),
    click.option(
        "--single-vc",
        is_flag=True,
        help="Replace the config's VCs by one VC owning the whole cluster (the paper's setting).",
    ),
    click.option(
        "--opportunistic",
        type=FINITE,
        default=0.0,
        show_default=True,
        help="Paper workload: fraction of jobs submitted as opportunistic.",
    ),
    click.option(
        "--bad-node",
        "bad_nodes",
        multiple=True,
        metavar="NODE:START_S[:END_S]",
        help="Mark a node bad for a time window (repeatable).",
    ),
    click.option(
        "--target-load",
        type=FINITE,
        help="With --vcs: resize each VC to its jobs' demand so the replay runs at this load (e.g. 0.7).",
    ),
    click.option("--no-private", is_flag=True, help="Skip the private-cluster baseline runs."),
    click.option(
        "--backfill",
        is_flag=True,
        help="Give each VC's waiting head a backfill reservation (as the controller).",
    ),
    click.option(
        "--starve-after-h",
        type=FINITE,
        default=12.0,
        show_default=True,
        help="With reservations: a job waiting this long (hours) becomes its VC's head, whatever the policy's order.",
    ),
    click.option(
        "--fairshare-half-life-h",
        type=FINITE,
        help="Order a VC's jobs of one class by their users' GPU-hours decaying with this half-life (hours).",
    ),
)

#: what to print or write
_OUTPUT_OPTIONS = (
    click.option("--json", "as_json", is_flag=True, help="One JSON object per policy and mode."),
    click.option(
        "--plot", "plot_dir", type=click.Path(file_okay=False), help="Write PNG plots into this directory."
    ),
)


@click.command("simulate")
@options(*_WORKLOAD_OPTIONS, *_REPLAY_OPTIONS, *_OUTPUT_OPTIONS)
def simulate(
    workload: str | None,
    rate: float,
    hours: float,
    n_jobs: int,
    seed: int,
    trace: str | None,
    trace_format: str | None,
    vcs_file: str | None,
    policy: str,
    mode: str,
    config: str | None,
    single_vc: bool,
    opportunistic: float,
    bad_nodes: tuple[str, ...],
    target_load: float | None,
    no_private: bool,
    backfill: bool,
    starve_after_h: float,
    fairshare_half_life_h: float | None,
    as_json: bool,
    plot_dir: str | None,
) -> None:
    """Simulate scheduling policies on a virtual clock with the real cell core and QoS model.

    \b
    Examples:
      hivebatch simulate --workload paper --rate 10 --policy all
      hivebatch simulate --workload sharing --hours 72 --seed 2
      hivebatch simulate --workload starvation --hours 48 --seed 1
      hivebatch simulate --trace philly-sep-dec.csv --trace-format philly --vcs philly-vcs.csv --mode both
    """
    if workload == "sharing":
        _simulate_sharing(config, seed, hours, as_json)
        return
    if starve_after_h < 0:
        raise click.UsageError("--starve-after-h must be >= 0 hours")
    if workload in ("starvation", "fairness"):
        _simulate_inside_vc(workload, seed, hours, policy, starve_after_h * 3600.0, as_json)
        return
    from hivebatch.qos import POLICY_NAMES
    from hivebatch.sim import setup
    from hivebatch.sim.runner import run_all

    if not 0.0 <= opportunistic <= 1.0:
        raise click.UsageError("--opportunistic must be between 0 and 1")
    bad = [_parse_bad_node(b) for b in bad_nodes]
    data, cfg_dir, jobs, note, scaling = _load(
        workload, trace, trace_format, vcs_file, config, rate, hours, seed, n_jobs, opportunistic, single_vc,
        target_load,
    )  # fmt: skip
    spec = setup.build_spec(data)
    for b in bad:
        if not spec.has_node(b.node):
            raise click.UsageError(f"--bad-node: no node {b.node!r} in the cluster")
    if fairshare_half_life_h is not None and fairshare_half_life_h <= 0:
        raise click.UsageError("--fairshare-half-life-h must be > 0 hours")
    exp = setup.build_experiment(spec, data, cfg_dir, jobs, bad, private_baseline=not no_private)
    exp.backfill = backfill
    exp.starve_after_s = starve_after_h * 3600.0
    exp.fairshare_half_life_s = fairshare_half_life_h * 3600.0 if fairshare_half_life_h else None
    policies = list(POLICY_NAMES) if policy == "all" else [policy]
    modes = ["cells", "quota"] if mode == "both" else [mode]
    with _Progress(sys.stderr.isatty()) as progress:
        results = run_all(exp, policies, modes, progress.factory)
    if note:
        click.echo(note, err=True)
    if scaling is not None:
        click.echo(scaling.summary(), err=as_json)
    for n in sorted(exp.runtime.notes):
        click.echo(f"note: {n}", err=True)
    paper = {"rate_per_hour": rate, "hours": hours, "seed": seed} if workload == "paper" else None
    _echo_results(results, as_json, paper, scaling)
    if plot_dir:
        from hivebatch.sim.plots import write_plots

        for p in write_plots(results, plot_dir):
            click.echo(f"wrote {p}", err=True)


def _echo_results(
    results: list[RunSummary], as_json: bool, paper: dict[str, float] | None, scaling: Scaling | None
) -> None:
    """One JSON object per run (with the paper workload's parameters and any VC scaling), else a table."""
    if not as_json:
        _print_table(results, sys.stdout.isatty())
        return
    for r in results:
        obj = r.to_json()
        if paper is not None:
            obj.update(paper)
        if scaling is not None:
            obj["scaled"] = scaling.as_dict()
        click.echo(json.dumps(obj, sort_keys=False))
