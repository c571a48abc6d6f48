"""Report plots with matplotlib's Agg backend (no display needed), returned as PNG bytes."""

from __future__ import annotations

import io
from typing import Any

from hivebatch.errors import HivebatchError

try:
    import matplotlib
except ModuleNotFoundError:  # an optional extra: login nodes do without it
    raise HivebatchError(
        "the HTML report draws its plots with matplotlib: install it with pip install 'hivebatch[reports]'"
    ) from None

matplotlib.use("Agg")

import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from hivebatch.reports.gpumap import ClusterMap  # noqa: E402
from hivebatch.reports.rows import GUARANTEED_CLASSES  # noqa: E402
from hivebatch.reports.series import OPPORTUNISTIC_SERIES, UsageSeries  # noqa: E402
from hivebatch.reports.usage import ClassRate, QuotaReport  # noqa: E402

PALETTE = [
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#e15759",
    "#bab0ac",
]
OPPORTUNISTIC_COLOR = "#c7c7c7"


def vc_colors(vcs: list[str]) -> dict[str, str]:
    """One stable colour per VC, shared by plots, the HTML map and the terminal map."""
    return {vc: PALETTE[i % len(PALETTE)] for i, vc in enumerate(sorted(vcs))}


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _style(ax: Any) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)


def plot_utilization(
    series: UsageSeries, total_gpus: int, colors: dict[str, str], reserved: dict[str, int]
) -> bytes:
    """Stacked GPUs in use per VC over time, opportunistic work on top, the cluster size as a line."""
    fig, ax = plt.subplots(figsize=(9.5, 3.4))
    keys = list(series.series)
    if keys:
        # one extra point at the window's end so the last bin is drawn to the edge
        xs = mdates.date2num([*series.starts, series.until])
        ys = [[*series.series[k], series.series[k][-1]] for k in keys]
        cols = [OPPORTUNISTIC_COLOR if k == OPPORTUNISTIC_SERIES else colors.get(k, "#888888") for k in keys]
        labels = [
            "opportunistic (all VCs)" if k == OPPORTUNISTIC_SERIES else f"{k} (reserves {reserved.get(k, 0)})"
            for k in keys
        ]
        stack = ax.stackplot(xs, *ys, colors=cols, labels=labels, step="post", alpha=0.9)
        for poly, key in zip(stack, keys, strict=True):
            if key == OPPORTUNISTIC_SERIES:
                poly.set_hatch("///")
                poly.set_edgecolor("#8a8a8a")
    ax.axhline(total_gpus, color="#333333", linestyle="--", linewidth=1)
    left, right = mdates.date2num([series.starts[0], series.until])
    ax.text(left, total_gpus, f" {total_gpus} GPUs", va="bottom", fontsize=8, color="#333333")
    ax.set_ylim(0, max(1, total_gpus) * 1.12)
    ax.set_xlim(left, right)
    ax.xaxis_date()
    ax.set_ylabel("GPUs in use")
    ax.set_title("GPUs in use per VC", loc="left", fontsize=11)
    _style(ax)
    if keys:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    return _png(fig)


def plot_queue_cdf(delays: dict[str, list[float]], colors: dict[str, str]) -> bytes:
    """Cumulative share of jobs started within a given wait, one line per VC."""
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    longest = max((max(v) for v in delays.values() if v), default=0.0)
    unit, scale = ("h", 3600.0) if longest >= 3 * 3600 else ("min", 60.0)
    plotted = False
    for vc in sorted(delays):
        values = sorted(delays[vc])
        if not values:
            continue
        xs = [0.0] + [v / scale for v in values]
        ys = [0.0] + [(i + 1) / len(values) for i in range(len(values))]
        ax.step(
            xs,
            ys,
            where="post",
            color=colors.get(vc, "#888888"),
            label=f"{vc} ({len(values)} jobs)",
            linewidth=2,
        )
        plotted = True
    ax.set_xlabel(f"queuing delay ({unit})")
    ax.set_ylabel("share of jobs started")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(left=0)
    ax.set_title("Queuing delay distribution", loc="left", fontsize=11)
    _style(ax)
    if plotted:
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no job started in this window", ha="center", va="center", transform=ax.transAxes)
    return _png(fig)


def plot_qos_rates(rep: QuotaReport, colors: dict[str, str]) -> bytes:
    """Share of jobs that met their ECT, per class, one bar per VC and one for the whole cluster."""
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    groups: list[tuple[str, dict[str, ClassRate], str]] = [
        (v.name, v.qos, colors.get(v.name, "#888888")) for v in rep.vcs
    ]
    groups.append(("all", rep.totals.qos, "#333333"))
    width = 0.8 / max(1, len(groups))
    for g, (name, rates, color) in enumerate(groups):
        for c, cls in enumerate(GUARANTEED_CLASSES):
            r = rates.get(cls, ClassRate())
            x = c + (g - (len(groups) - 1) / 2) * width
            if r.total:
                ax.bar(x, 100 * (r.rate or 0), width * 0.92, color=color, label=name if c == 0 else None)
                ax.text(x, 100 * (r.rate or 0) + 1.5, f"{r.met}/{r.total}", ha="center", fontsize=7)
            else:
                ax.bar(x, 0, width * 0.92, color=color, label=name if c == 0 else None)
                ax.text(x, 1.5, "–", ha="center", fontsize=7, color="#999999")
    ax.set_xticks(range(len(GUARANTEED_CLASSES)), list(GUARANTEED_CLASSES))
    ax.set_ylim(0, 112)
    ax.set_ylabel("% of jobs that met their ECT")
    ax.set_title("QoS guarantee rate per class", loc="left", fontsize=11)
    _style(ax)
    ax.legend(
        fontsize=8, frameon=False, ncol=min(4, len(groups)), loc="upper center", bbox_to_anchor=(0.5, -0.1)
    )
    return _png(fig)


def plot_gpu_map(cmap: ClusterMap, colors: dict[str, str]) -> bytes:
    """The node × GPU map as a picture (for slides and mails; the HTML page has it as a table)."""
    from matplotlib.patches import Patch, Rectangle

    nodes = cmap.nodes
    width = max((len(n.slots) for n in nodes), default=1)
    labels = len(nodes) <= 32
    fig_h = max(1.6, 0.32 * len(nodes) + 1.0) if labels else max(1.6, 0.12 * len(nodes) + 1.0)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.75 * width + 2.0), fig_h))
    for row, node in enumerate(nodes):
        y = len(nodes) - 1 - row
        gap = 0.0
        for pos, s in enumerate(node.slots):
            x = pos + gap
            hatch = None
            if s.bad:
                face, edge, text = "#f3c1c4", "#cf222e", "bad"
                hatch = "xx"
            elif s.kind == "foreign":
                face, edge, text = "#555555", "#333333", "frgn"
            elif s.kind == "opportunistic":
                face, edge, text = colors.get(s.vc or "", OPPORTUNISTIC_COLOR), "#666666", s.job or ""
                hatch = "///"
            elif s.job:
                face, edge, text = colors.get(s.vc or "", "#888888"), "#444444", s.job
            elif s.shared:
                face, edge, text = "#d9d9d9", "#999999", "shrd"
            else:
                face, edge, text = "#ffffff", "#bbbbbb", ""
            ax.add_patch(
                Rectangle(
                    (x, y + 0.08), 0.92, 0.84, facecolor=face, edgecolor=edge, hatch=hatch, linewidth=0.8
                )
            )
            if labels and text:
                ax.text(x + 0.46, y + 0.5, text[-5:], ha="center", va="center", fontsize=6.5,
                        color="white" if s.job and not s.bad and s.kind != "opportunistic" else "#222222")  # fmt: skip
            gap += 0.12 * node.boundary_level(pos) if pos < len(node.slots) - 1 else 0.0
    ax.set_xlim(-0.1, width + 0.12 * width / 2 + 0.2)
    ax.set_ylim(0, len(nodes))
    ax.set_yticks([len(nodes) - 1 - i + 0.5 for i in range(len(nodes))], [n.name for n in nodes],
                  fontsize=8 if labels else 5)  # fmt: skip
    ax.set_xticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(left=False)
    ax.set_title("GPUs now (VC colour; hatched = opportunistic)", loc="left", fontsize=10)
    handles = [Patch(facecolor=c, label=vc) for vc, c in colors.items()]
    handles += [
        Patch(facecolor="#555555", label="foreign"),
        Patch(facecolor="#f3c1c4", hatch="xx", label="bad"),
    ]
    ax.legend(handles=handles, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)
