"""``hivebatch cells``: check a cluster/VC layout, replay scenarios through the cell core."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from hivebatch.cells import CellAllocator, ClusterSpec, InfeasibleConfigError
from hivebatch.cells.capacity import config_capacity
from hivebatch.cells.replay import load_scenario, run_steps
from hivebatch.config import read_yaml


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on a terminal; aligned plain columns when piped (easy to grep and diff)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        for h in headers:
            t.add_column(h)
        for r in rows:
            t.add_row(*(str(x) for x in r))
        Console().print(t)
        return
    cells = [list(map(str, headers)), *[[str(x) for x in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    click.echo(f"{title}")
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    click.echo("")


@click.group()
def cells() -> None:
    """Cells and virtual clusters (HiveD): check a layout, replay scenarios."""


@cells.command("check")
@click.argument("config", type=click.Path(dir_okay=False))
def check(config: str) -> None:
    """Validate CONFIG's cluster and virtual_clusters and show each VC's cells and the capacity left."""
    from hivebatch.cells import parse_cluster_config

    spec = parse_cluster_config(read_yaml(config))
    _print_check(spec)


def _print_check(spec: ClusterSpec) -> None:
    rows = []
    for cname, ch in spec.chains.items():
        nodes = [n.name for n in spec.nodes if n.chain == cname]
        path = " > ".join(reversed(ch.types))
        rows.append((cname, path, ch.gpus_per_node, len(nodes), spec.total_gpus(cname), _short_list(nodes)))
    _table(
        "Chains", ["GPU type", "cell types (top > leaf)", "GPUs/node", "nodes", "GPUs", "node names"], rows
    )

    rows = []
    for vname, vc in spec.vcs.items():
        parts = ", ".join(f"{t} x{k}" for t, k in vc.cells.items()) or "(none: opportunistic only)"
        per_chain = ", ".join(f"{spec.vc_gpus(vname, c)} {c}" for c in spec.vc_chains(vname)) or "0"
        rows.append((vname, parts, per_chain))
    _table("Virtual clusters", ["VC", "cells", "GPUs"], rows)

    rows = []
    for cname, levels in config_capacity(spec).items():
        for lv, avail, needed in levels:
            tname = spec.chains[cname].type_at(lv)
            users = ", ".join(f"{v}:{vc.cells[tname]}" for v, vc in spec.vcs.items() if tname in vc.cells)
            rows.append(
                (cname, lv, tname, spec.cell_types[tname].gpus, avail, needed, avail - needed, users or "-")
            )
    _table(
        "Capacity per level (available counts splits of the cells left above)",
        ["chain", "level", "cell type", "GPUs/cell", "available", "VCs need", "left", "by VC"],
        rows,
    )
    total = spec.total_gpus()
    held = sum(spec.vc_gpus(v) for v in spec.vcs)
    pct = 100 * held / total if total else 0
    click.echo(
        f"ok: {len(spec.nodes)} nodes, {total} GPUs; the VCs are guaranteed {held} GPUs ({pct:.0f}%), "
        f"{total - held} GPUs left for opportunistic jobs only"
    )


def _short_list(names: list[str], limit: int = 6) -> str:
    return (
        ", ".join(names) if len(names) <= limit else f"{', '.join(names[:limit])}, ... ({len(names)} nodes)"
    )


@cells.command("replay")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per step (the conformance format).")
@click.option("--map", "show_map", is_flag=True, help="Also print who holds each GPU after the last step.")
def replay(scenario: str, as_json: bool, show_map: bool) -> None:
    """Run SCENARIO's steps (allocate/release/bad_node/healthy_node) through the cell core.

    Nothing touches Slurm or the database: use it to try a VC layout before deploying it.
    """
    data = read_yaml(scenario)
    try:
        spec, steps = load_scenario(data)
        alloc = CellAllocator(spec)
    except InfeasibleConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    results = run_steps(alloc, steps)
    if as_json:
        for out in results:
            click.echo(json.dumps(out, separators=(",", ":")))
        return
    rows = []
    for out in results:
        subject = out.get("job") or out.get("node") or ""
        if out["result"] == "placed":
            detail = "; ".join(f"{n}:{_idx(ix)}" for n, ix in out["placement"].items())
            if out.get("preempted"):
                detail += f"  (preempts {', '.join(out['preempted'])})"
        else:
            detail = out.get("reason") or out.get("error") or ""
        rows.append((out["step"], out["op"], subject, out["result"], detail))
    _table(f"Replay of {scenario}", ["step", "op", "job/node", "result", "placement / reason"], rows)
    views = alloc.vc_views()
    vrows = []
    for vname, view in views.items():
        cells_txt = ", ".join(f"{t} {c.bound}/{c.total} bound" for t, c in view.cells.items()) or "-"
        vrows.append((vname, cells_txt, view.gpus_used, view.gpus_free, view.capacity, view.reason or ""))
    _table(
        "Virtual clusters after the last step",
        ["VC", "cells", "GPUs used", "free", "capacity", "note"],
        vrows,
    )
    if show_map:
        _print_map(alloc)


def _print_map(alloc: CellAllocator) -> None:
    """One row per node: for each GPU, the job on it; VC:- when bound but idle; . when free."""
    gmap = alloc.gpu_map()
    width = max((len(row) for row in gmap.values()), default=0)
    index_sets = {tuple(sorted(row)) for row in gmap.values()}
    # columns are GPU indices when every node has the same ones, else positions with idx= prefixes
    same = len(index_sets) == 1
    header = [str(i) for i in next(iter(index_sets))] if same else [f"#{i}" for i in range(width)]
    rows = []
    for node, row in gmap.items():
        cells = []
        for idx in sorted(row):
            u = row[idx]
            if u.bad:
                text = "BAD" if u.job is None else f"{u.job}(BAD)"
            elif u.foreign:
                text = "outside"
            elif u.job is not None:
                text = f"{u.job}(opp)" if u.opportunistic else u.job
            else:
                text = f"{u.vc}:-" if u.vc else "."
            cells.append(text if same else f"{idx}={text}")
        rows.append((node, *cells, *[""] * (width - len(cells))))
    _table(
        "GPUs after the last step (job; VC:- when bound and idle; . when free)",
        ["node", *header],
        rows,
    )


def _idx(ix: list[int]) -> str:
    return ",".join(map(str, ix))
