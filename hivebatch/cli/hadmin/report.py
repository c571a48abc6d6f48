"""``hadmin report quota|users|html``: who used what, who waited, which deadlines held."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

import click

from hivebatch.cli.common import config_option
from hivebatch.errors import HivebatchError

FORMATS = click.Choice(["table", "csv", "json", "html"])
SINCE_HELP = "start of the window: YYYY-MM-DD[THH:MM] (UTC) or a span back like 12h, 7d, 2w (default: 7d)"
UNTIL_HELP = "end of the window (default: now); same forms as --since"


def _window_options(func):  # type: ignore[no-untyped-def]
    func = click.option("--until", "until_text", metavar="DATE", help=UNTIL_HELP)(func)
    func = click.option("--since", "since_text", metavar="DATE", help=SINCE_HELP)(func)
    func = config_option(func)
    return func


_format_option = click.option(
    "--format", "fmt", type=FORMATS, default="table", show_default=True, help="output format"
)


def _compute(config: str | None, since_text: str | None, until_text: str | None, vc: str | None):  # type: ignore[no-untyped-def]
    from hivebatch.reports.load import default_since, load_report_data, resolve_window
    from hivebatch.reports.topology import gpus_per_node
    from hivebatch.reports.usage import quota_report
    from hivebatch.reports.users import users_report

    since, until = resolve_window(since_text, until_text)
    data = load_report_data(config, since, need_ledger=True)
    data.check_vc(vc)
    if since is None:
        since = default_since(data.jobs, until)
    quota = quota_report(
        data.jobs, data.segments, data.vcs, since, until, data.total_gpus, only_vc=vc, now=data.vc_now
    )
    users = users_report(data.jobs, data.segments, since, until, gpus_per_node(data.layouts), only_vc=vc)
    return data, quota, users


def _no_db_note(data) -> None:  # type: ignore[no-untyped-def]
    if not data.has_db:
        click.echo(
            "note: no hivebatch database yet (run `hivebatch db upgrade` and the controller); figures are empty",
            err=True,
        )


def _inputs(data, quota, users, vc: str | None, use_slurm: bool = True):  # type: ignore[no-untyped-def]
    from hivebatch.reports.html import ReportInputs
    from hivebatch.reports.load import cluster_map

    cmap, source = cluster_map(data, use_slurm=use_slurm)
    jobs = [j for j in data.jobs if vc is None or j.vc == vc]
    segments = [s for s in data.segments if vc is None or s.vc == vc]
    title = "hivebatch cluster report" + (f" — VC {vc}" if vc else "")
    return ReportInputs(
        quota=quota,
        users=users,
        jobs=jobs,
        segments=segments,
        cluster=cmap,
        cluster_taken_at=data.slots_taken_at,
        cluster_source=source,
        title=title,
    )


def _html(data, quota, users, vc: str | None, use_slurm: bool = True) -> str:  # type: ignore[no-untyped-def]
    from hivebatch.reports.html import render_html

    return render_html(_inputs(data, quota, users, vc, use_slurm))


@click.group()
def report() -> None:
    """Usage reports: per VC (quota), per user, and one HTML page with plots."""


@report.command()
@_window_options
@click.option("--vc", metavar="NAME", help="only this virtual cluster")
@_format_option
def quota(
    config: str | None, since_text: str | None, until_text: str | None, vc: str | None, fmt: str
) -> None:
    """Per VC: cells, GPUs reserved, GPU-hours used, waits, QoS rate per class, missed deadlines.

    Also the cluster totals, GPU-hours lent to opportunistic work and lost to preemption, the
    jobs waiting now and why, where the free GPUs are, and a status per VC: starved (its jobs
    wait beyond what its own cells would give), full (over 80% of its reservation used), idle
    (under 25% used, nothing pending) or ok.
    """
    from hivebatch.reports.render import quota_csv, quota_dict, quota_notes, quota_tables
    from hivebatch.reports.tables import print_tables

    data, rep, users = _compute(config, since_text, until_text, vc)
    _no_db_note(data)
    if fmt == "json":
        click.echo(json.dumps(quota_dict(rep), indent=2))
    elif fmt == "csv":
        click.echo(quota_csv(rep), nl=False)
    elif fmt == "html":
        click.echo(_html(data, rep, users, vc))
    else:
        from hivebatch.reports.gpumap import build_cluster_map

        frag = None
        if data.slots and vc is None:
            # the ledger's picture only: a report must not depend on Slurm answering
            frag = build_cluster_map(data.layouts, data.slots).fragmentation()
        print_tables(quota_tables(rep), notes=quota_notes(rep, frag))


@report.command()
@_window_options
@click.option("--vc", metavar="NAME", help="only jobs of this virtual cluster")
@_format_option
def users(
    config: str | None, since_text: str | None, until_text: str | None, vc: str | None, fmt: str
) -> None:
    """Per user: GPU-hours, waits, deadlines met, preemptions, and waste flags; and the use of the
    strict classes (urgent, prior) over the last 7 days against the config's user_limits.

    Flags: time limits far longer than the jobs run, frequent preemption, multi-node jobs whose GPUs
    would fit on one node.
    """
    from hivebatch.reports.load import load_strict_lines
    from hivebatch.reports.render import (
        strict_dicts,
        strict_table,
        users_csv,
        users_dicts,
        users_flag_lines,
        users_table,
        window_line,
    )
    from hivebatch.reports.tables import print_tables

    data, rep, user_rows = _compute(config, since_text, until_text, vc)
    _no_db_note(data)
    strict = load_strict_lines(data, rep.until, only_vc=vc)
    if fmt == "json":
        payload = {
            "since": rep.since.isoformat(),
            "until": rep.until.isoformat(),
            "users": users_dicts(user_rows),
            "strict_classes": strict_dicts(strict),
        }
        click.echo(json.dumps(payload, indent=2))
    elif fmt == "csv":
        click.echo(users_csv(user_rows), nl=False)
    elif fmt == "html":
        click.echo(_html(data, rep, user_rows, vc))
    else:
        tables = [users_table(user_rows, with_flags=False), *([strict_table(strict)] if strict else [])]
        print_tables(tables, notes=[window_line(rep), *users_flag_lines(user_rows)])


@report.command()
@_window_options
@click.option("--vc", metavar="NAME", help="only this virtual cluster")
@click.option("--no-slurm", is_flag=True, help="draw the GPU map from the controller's last cycle only")
@click.option("--plots", "plots_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="also write the plots and the GPU map as PNG files into DIR (for slides and mails)")  # fmt: skip
@click.argument("out", metavar="OUT.html", type=click.Path(dir_okay=False, allow_dash=True))
def html(
    config: str | None,
    since_text: str | None,
    until_text: str | None,
    vc: str | None,
    no_slurm: bool,
    plots_dir: str | None,
    out: str,
) -> None:
    """Write one self-contained HTML page: tables, plots and the node × GPU map (`-` = stdout)."""
    from hivebatch.reports.html import render_html, write_plots

    data, rep, user_rows = _compute(config, since_text, until_text, vc)
    _no_db_note(data)
    inputs = _inputs(data, rep, user_rows, vc, use_slurm=not no_slurm)
    page = render_html(inputs)
    if plots_dir is not None:
        written = write_plots(inputs, Path(plots_dir))
        names = ", ".join(p.name for p in written)
        click.echo(f"wrote {len(written)} plots into {plots_dir}: {names}", err=out == "-")
    if out == "-":
        click.echo(page)
        return
    _write_atomically(Path(out), page)
    click.echo(f"wrote {out} ({len(page) // 1024} KiB, window {_fmt(rep.since)} → {_fmt(rep.until)} UTC)")


def _fmt(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M")


def _write_atomically(path: Path, text: str) -> None:
    """A reader never sees half a page: write a temporary file next to it, then rename."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise HivebatchError(f"cannot write {path}: directory {directory} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise HivebatchError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise HivebatchError(f"cannot write {path}: {exc.strerror}") from None
