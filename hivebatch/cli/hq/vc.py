"""``hq vc [NAME]``: a virtual cluster's cells — how many of each type, bound, in use, free — and its GPUs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hivebatch.errors import HivebatchError


def vc_report(alloc: Any, spec: Any, vc: str) -> dict[str, Any]:
    view = alloc.vc_view(vc)
    gpus: dict[str, dict[int, Any]] = {}
    for node, row in alloc.gpu_map().items():
        for idx, use in row.items():
            if use.vc == vc:
                gpus.setdefault(node, {})[idx] = use
    jobs: dict[str, dict[str, list[int]]] = {}
    opportunistic: set[str] = set()
    for node, row in gpus.items():
        for idx, use in sorted(row.items()):
            if use.job:
                jobs.setdefault(use.job, {}).setdefault(node, []).append(idx)
                if use.opportunistic:
                    opportunistic.add(use.job)
    bound = [b for b in alloc.bindings() if b["vc"] == vc]
    return {
        "vc": vc,
        "gpus_total": view.gpus_total,
        "gpus_used": view.gpus_used,
        "gpus_free": view.gpus_free,
        "capacity": view.capacity,
        "reason": view.reason,
        "opportunistic_gpus": view.opportunistic_gpus,
        "cells": [
            {
                "type": c.cell_type,
                "gpus_per_cell": c.gpus_per_cell,
                "total": c.total,
                "bound": c.bound,
                "free": c.free,
                "unavailable": c.unavailable,
            }
            for c in view.cells.values()
        ],
        "bound_cells": [
            {"type": b["type"], "gpus": {n: sorted(g) for n, g in b["gpus"].items()}} for b in bound
        ],
        "jobs": [
            {
                "job_id": j,
                "placement": {n: sorted(g) for n, g in p.items()},
                "opportunistic": j in opportunistic,
            }
            for j, p in sorted(jobs.items())
        ],
    }


def _plain(report: dict[str, Any], source: str) -> str:
    from hivebatch.state.formats import format_placement

    lines = [
        f"VC {report['vc']}: {report['gpus_total']} GPUs, {report['gpus_used']} in use, {report['gpus_free']} free"
        + (f", capacity {report['capacity']}" if report["capacity"] != report["gpus_total"] else "")
    ]
    if report["reason"]:
        lines.append(f"  {report['reason']}")
    header = ("CELL TYPE", "GPUS/CELL", "CELLS", "BOUND", "FREE", "UNAVAILABLE")
    rows = [
        (
            c["type"],
            str(c["gpus_per_cell"]),
            str(c["total"]),
            str(c["bound"]),
            str(c["free"]),
            str(c["unavailable"]),
        )
        for c in report["cells"]
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for r in [header, *rows]:
        lines.append(
            "  " + "  ".join(v.ljust(widths[i]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(r))
        )
    for b in report["bound_cells"]:
        lines.append(f"  bound {b['type']}: {format_placement(b['gpus'])}")
    for j in report["jobs"]:
        tag = " (opportunistic)" if j["opportunistic"] else ""
        lines.append(f"  job {j['job_id']}{tag}: {format_placement(j['placement'])}")
    return "\n".join(lines)


def _rich(report: dict[str, Any]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from hivebatch.state.formats import format_placement

    title = f"VC {report['vc']}: {report['gpus_total']} GPUs · {report['gpus_used']} in use · {report['gpus_free']} free"
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for name, just in (("CELL TYPE", "left"), ("GPUS/CELL", "right"), ("CELLS", "right"), ("BOUND", "right"),
                       ("FREE", "right"), ("UNAVAILABLE", "right")):  # fmt: skip
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    for c in report["cells"]:
        table.add_row(c["type"], str(c["gpus_per_cell"]), str(c["total"]), str(c["bound"]), str(c["free"]),
                      str(c["unavailable"]) if c["unavailable"] else "")  # fmt: skip
    console = Console()
    console.print(table)
    # Text, not markup: a reason may quote what a user typed
    if report["reason"]:
        console.print(Text(f"  {report['reason']}", style="yellow"))
    for b in report["bound_cells"]:
        console.print(Text(f"  bound {b['type']}: {format_placement(b['gpus'])}"))
    for j in report["jobs"]:
        tag = " (opportunistic)" if j["opportunistic"] else ""
        console.print(
            Text(f"  job {j['job_id']}{tag}: ").append(format_placement(j["placement"]), style="green")
        )


def show_vcs(config_path: Path, config: dict[str, Any], name: str | None, as_json: bool = False) -> int:
    from hivebatch.cells import parse_cluster_config
    from hivebatch.state.ledger import read_ledger
    from hivebatch.state.rebuild import reader_allocator

    spec = parse_cluster_config(config)
    if name is not None and name not in spec.vcs:
        raise HivebatchError(
            f"unknown virtual cluster {name!r}: this cluster has {', '.join(sorted(spec.vcs))}"
        )
    ledger = read_ledger(config_path, config, want_cells=True)
    alloc, source = reader_allocator(spec, ledger.snapshot, ledger.snapshot_time)
    names = [name] if name else list(spec.vcs)
    reports = [vc_report(alloc, spec, n) for n in names]
    if as_json:
        print(json.dumps(reports if name is None else reports[0], indent=2))
        return 0
    if sys.stdout.isatty():
        for r in reports:
            _rich(r)
        print(f"(cells as of {source})", file=sys.stderr)
    else:
        print("\n\n".join(_plain(r, source) for r in reports))
        print(f"(cells as of {source})")
    return 0
