"""The node × GPU map for a terminal (rich colours) or a pipe (plain labels)."""

from __future__ import annotations

from typing import IO, Any

from hivebatch.reports.gpumap import ClusterMap, GpuSlot
from hivebatch.slurm.types import Reservation

CELL_W = 5
# Named colours survive 16-colour terminals; red is kept for bad nodes. Same order as the HTML palette.
TERMINAL_PALETTE = [
    "blue",
    "yellow",
    "green",
    "magenta",
    "cyan",
    "bright_blue",
    "bright_green",
    "bright_magenta",
]


def terminal_colors(vcs: list[str]) -> dict[str, str]:
    return {vc: TERMINAL_PALETTE[i % len(TERMINAL_PALETTE)] for i, vc in enumerate(sorted(vcs))}


SEPARATORS = {0: " ", 1: " │ ", 2: " ┃ ", 3: " "}
PLAIN_SEPARATORS = {0: " ", 1: " | ", 2: " || ", 3: " "}


def slot_label(s: GpuSlot) -> str:
    if s.bad:
        return "BAD"
    if s.kind == "foreign":
        return "frgn"
    if s.job:
        return s.job[-5:] + ("*" if s.kind == "opportunistic" else "")
    if s.shared:
        return "shrd"
    return "·"


def plain_slot(s: GpuSlot) -> str:
    """Plain text keeps the VC in the label, since there is no colour: ``cv:101``, ``nlp:110*``."""
    if s.bad:
        return "BAD"
    if s.kind == "foreign":
        return "foreign"
    if s.job:
        return f"{s.vc or '?'}:{s.job}" + ("*" if s.kind == "opportunistic" else "")
    if s.shared:
        return "shared"
    if s.vc:
        return f"({s.vc})"
    return "-"


def map_dict(cmap: ClusterMap) -> dict[str, Any]:
    frag = cmap.fragmentation()
    return {
        "nodes": [
            {
                "name": n.name,
                "gpu_type": n.gpu_type,
                "state": n.state,
                "bad": n.bad,
                "free": n.free_gpus,
                "gpus": [
                    {
                        "index": s.index,
                        "kind": s.kind,
                        "vc": s.vc,
                        "job": s.job,
                        "user": s.user,
                        "bad": s.bad,
                        "shared": s.shared,
                        "stale": s.stale,
                        "share": s.share,
                    }
                    for s in n.slots
                ],
            }
            for n in cmap.nodes
        ],
        "counts": cmap.counts(),
        "stale_gpus": cmap.stale_gpus,
        "fragmentation": {
            "free_gpus": frag.free_gpus,
            "free_nodes": frag.free_nodes,
            "stranded_gpus": frag.stranded_gpus,
            "largest_block": frag.largest_block,
            "partly_used_nodes": [{"node": n, "free": f} for n, f in frag.partly_used_nodes],
            "free_cells": frag.free_cells,
            "bad_nodes": frag.bad_nodes,
        },
    }


def summary_lines(cmap: ClusterMap) -> list[str]:
    frag = cmap.fragmentation()
    c = cmap.counts()
    lines = [
        f"GPUs: {c['guaranteed']} guaranteed, {c['opportunistic']} opportunistic (*), {c['foreign']} foreign, "
        + (f"{c['shared']} shared by fractional jobs, " if c["shared"] else "")
        + f"{c['free']} free, {c['bad']} on bad nodes",
        f"Free: {frag.summary()}.",
    ]
    if frag.free_cells:
        lines.append("Free cells: " + ", ".join(f"{n}× {name}" for name, n in frag.free_cells.items()) + ".")
    if frag.partly_used_nodes:
        lines.append(
            "Fragmented: " + ", ".join(f"{node} ({free} free)" for node, free in frag.partly_used_nodes) + "."
        )
    shares = [f"{n.name}:[{s.index}] {s.share}" for n in cmap.nodes for s in n.slots if s.share]
    if shares:
        lines.append("Shared GPUs: " + "; ".join(shares) + ".")
    if frag.bad_nodes:
        lines.append("Bad nodes (no new work): " + ", ".join(frag.bad_nodes) + ".")
    if cmap.stale_gpus:
        lines.append(
            f"Stale: {cmap.stale_gpus} GPUs the controller's last cycle shows busy are idle in Slurm now "
            "(shown free; the next cycle will record it)."
        )
    return lines


def print_map(
    cmap: ClusterMap,
    header: str,
    vc_names: list[str] | None = None,
    out: IO[str] | None = None,
    terminal: bool | None = None,
) -> None:
    """Coloured cells on a terminal, padded plain labels when piped (``terminal`` forces one)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, force_terminal=terminal, width=200 if terminal else None)
    width = max((len(n.name) for n in cmap.nodes), default=4)
    if not (console.is_terminal if terminal is None else terminal):
        lines = [header]
        cell = max((len(plain_slot(s)) for n in cmap.nodes for s in n.slots), default=1)
        for node in cmap.nodes:
            parts = []
            for pos, s in enumerate(node.slots):
                parts.append(plain_slot(s).ljust(cell))
                if pos < len(node.slots) - 1:
                    parts.append(PLAIN_SEPARATORS.get(node.boundary_level(pos), " "))
            state = f"  [{node.state}]" if node.state else ""
            lines.append(f"{node.name.ljust(width)}  {''.join(parts)}  ({node.free_gpus} free){state}")
        lines.extend(summary_lines(cmap))
        console.file.write("\n".join(lines) + "\n")
        return
    colors = terminal_colors(sorted(set(vc_names or []) | set(cmap.vcs)))
    console.print(header, markup=False)
    if cmap.nodes:
        idx = Text(" " * (width + 2))
        first = cmap.nodes[0]
        for pos, s in enumerate(first.slots):
            idx.append(f"{s.index}".center(CELL_W), style="dim")
            if pos < len(first.slots) - 1:
                idx.append(SEPARATORS.get(first.boundary_level(pos), " "))
        console.print(idx)
    for node in cmap.nodes:
        line = Text()
        line.append(node.name.ljust(width) + "  ", style="bold red" if node.bad else "bold")
        for pos, s in enumerate(node.slots):
            label = slot_label(s).center(CELL_W)
            if s.bad:
                style = "bold white on red"
            elif s.kind == "foreign":
                style = "white on bright_black"
            elif s.kind == "opportunistic":
                style = f"italic black on {colors.get(s.vc or '', 'white')}"
            elif s.job:
                style = f"bold black on {colors.get(s.vc or '', 'white')}"
            elif s.shared:
                style = "black on bright_white"
            elif s.vc:
                style = colors.get(s.vc, "white")
            else:
                style = "dim"
            line.append(label, style=style)
            if pos < len(node.slots) - 1:
                line.append(SEPARATORS.get(node.boundary_level(pos), " "), style="dim")
        line.append(f"  {node.free_gpus} free", style="dim")
        if node.state:
            line.append(f"  {node.state}", style="red" if node.bad else "dim")
        console.print(line, no_wrap=True, overflow="ellipsis")
    legend = Text("")
    for vc, color in colors.items():
        legend.append(f" {vc} ", style=f"bold black on {color}")
        legend.append(" ")
    legend.append(" job* ", style="italic black on white")
    legend.append(" opportunistic  ")
    legend.append(" frgn ", style="white on bright_black")
    legend.append(" foreign  ")
    legend.append(" BAD ", style="bold white on red")
    legend.append(" bad node   │ switch  ┃ socket")
    console.print(legend)
    for line_text in summary_lines(cmap):
        console.print(line_text, markup=False)


def reservation_lines(reservations: list[Reservation]) -> list[str]:
    """One line per reservation: the nodes where jobs whose time limit runs into it are not placed."""
    return [
        f"Reservation {r.name}: {', '.join(r.nodes) or 'no nodes'} from {r.start:%Y-%m-%d %H:%M} to "
        f"{r.end:%Y-%m-%d %H:%M} UTC (a job not in it starts there only if its time limit ends before)"
        for r in sorted(reservations, key=lambda r: (r.start, r.name))
    ]
