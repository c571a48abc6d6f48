"""The self-contained HTML report: tables, plots as embedded PNG, the node × GPU map."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2

from hivebatch import __version__
from hivebatch.reports.gpumap import ClusterMap, Fragmentation
from hivebatch.reports.plots import (
    OPPORTUNISTIC_COLOR,
    plot_gpu_map,
    plot_qos_rates,
    plot_queue_cdf,
    plot_utilization,
    vc_colors,
)
from hivebatch.reports.render import VERDICT_STYLE, quota_tables, users_table
from hivebatch.reports.rows import GUARANTEED_CLASSES, JobRow, RunSegment
from hivebatch.reports.series import usage_series
from hivebatch.reports.tables import TextTable
from hivebatch.reports.timeutil import fmt_duration, fmt_time
from hivebatch.reports.usage import QuotaReport, queue_delay_s
from hivebatch.reports.users import UserReport
from hivebatch.template_files import template_dir

TEMPLATE_NAME = "report.html.j2"
LIST_LIMIT = 25  # rows shown of the missed-deadline and waiting lists; the JSON/CSV outputs have all
USERS_LIMIT = 50  # users shown, by GPU-hours; `hadmin report users` has all


@dataclass
class ReportInputs:
    quota: QuotaReport
    users: list[UserReport]
    jobs: list[JobRow]
    segments: list[RunSegment]
    cluster: ClusterMap | None = None
    cluster_taken_at: datetime | None = None
    cluster_source: str = ""
    title: str = "hivebatch cluster report"
    notes: list[str] = field(default_factory=list)


def _lateness(job: JobRow, until: datetime) -> float:
    return ((job.end_time or until) - job.ect).total_seconds() if job.ect else 0.0


def _b64(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _table_ctx(table: TextTable) -> dict[str, Any]:
    rows = []
    for r, row in enumerate(table.rows):
        rows.append([{"text": v, "cls": _css_of(table.styles.get((r, c), ""))} for c, v in enumerate(row)])
    return {
        "title": table.title,
        "headers": table.headers,
        "rows": rows,
        "right": sorted(table.right),
        "footer": table.footer,
    }


def _css_of(style: str) -> str:
    return {
        "bold red": "bad",
        "yellow": "warn",
        "cyan": "full",
        "green": "ok",
    }.get(style, "")


def _map_ctx(cmap: ClusterMap, colors: dict[str, str]) -> list[dict[str, Any]]:
    nodes = []
    for node in cmap.nodes:
        slots = []
        for pos, s in enumerate(node.slots):
            if s.bad:
                cls, color, label = "gpu bad", "#ffffff", "bad"
            elif s.kind == "foreign":
                cls, color, label = "gpu foreign", "#555555", "foreign"
            elif s.kind == "opportunistic":
                cls, color, label = "gpu opp", colors.get(s.vc or "", OPPORTUNISTIC_COLOR), s.vc or "opp"
            elif s.shared and not s.job:
                cls, color, label = "gpu shared", "#d9d9d9", "shared"
            elif s.job:
                cls, color, label = "gpu used", colors.get(s.vc or "", "#888888"), s.vc or ""
            elif s.vc:
                cls, color, label = "gpu bound", colors.get(s.vc, "#888888"), s.vc
            else:
                cls, color, label = "gpu free", "#ffffff", ""
            tip = f"{node.name} GPU {s.index}: " + (
                "node is bad" if s.bad else (
                    f"{s.kind} job {s.job} ({s.user or '?'}, {s.vc or '-'})" if s.job else (
                        f"{s.kind}" + (f", cell bound to {s.vc}" if s.vc else "")
                    )
                )
            )  # fmt: skip
            slots.append(
                {
                    "index": s.index,
                    "cls": cls + f" edge{node.boundary_level(pos)}",
                    "color": color,
                    "label": label,
                    "job": s.job or "",
                    "shared": s.shared,
                    "title": tip,
                }
            )
        nodes.append(
            {
                "name": node.name,
                "gpu_type": node.gpu_type or "",
                "bad": node.bad,
                "state": node.state,
                "free": node.free_gpus,
                "slots": slots,
            }
        )
    return nodes


def _names(names: list[str], what: str) -> tuple[str, str]:
    """Card value and detail for a list of VCs: the names when few, else how many (names below)."""
    if not names:
        return "none", what
    if len(names) <= 3:
        return ", ".join(names), what
    return f"{len(names)} VCs", ", ".join(names)


def honest(cards: list[dict[str, str]], bad_gpus: int) -> list[dict[str, str]]:
    """A cluster with bad GPUs or a starved VC never shows green: a red card names the bad GPUs and no
    other card keeps its "ok" colour (its value stays, read on its own it would say all is well)."""
    starved = any(c["label"] == "Starved VCs" and c["cls"] == "bad" for c in cards)
    if bad_gpus:
        cards = [
            {
                "label": "Bad GPUs",
                "value": str(bad_gpus),
                "detail": "on DOWN/DRAIN nodes or marked bad",
                "cls": "bad",
            },
            *cards,
        ]
    if bad_gpus or starved:
        cards = [{**c, "cls": "" if c["cls"] == "ok" else c["cls"]} for c in cards]
    return cards


def _headline(quota: QuotaReport, frag: Fragmentation | None) -> list[dict[str, str]]:
    t = quota.totals
    overall = t.qos_overall
    starved = [v.name for v in quota.vcs if v.verdict == "starved"]
    full = [v.name for v in quota.vcs if v.verdict == "full"]
    idle = [v.name for v in quota.vcs if v.verdict == "idle"]
    cards = [
        {
            "label": "GPU utilisation",
            "value": "-" if t.utilization is None else f"{100 * t.utilization:.0f}%",
            "detail": f"{t.gpu_hours_guaranteed + t.gpu_hours_opportunistic:.0f} of {t.gpu_hours_capacity:.0f} GPU-h",
            "cls": "",
        },
        {
            "label": "Deadlines met",
            "value": "-" if not overall.total else f"{100 * (overall.rate or 0):.0f}%",
            "detail": f"{overall.met} of {overall.total} jobs met their ECT",
            "cls": "bad" if overall.total and (overall.rate or 0) < 0.9 else "",
        },
        {
            "label": "Starved VCs",
            "value": _names(starved, "jobs waiting beyond what their own cells would give")[0],
            "detail": _names(starved, "jobs waiting beyond what their own cells would give")[1],
            "cls": "bad" if starved else "ok",
        },
        {
            "label": "Full VCs",
            "value": _names(full, "over 80% of their reservation used; a backlog needs more cells")[0],
            "detail": _names(full, "over 80% of their reservation used; a backlog needs more cells")[1],
            "cls": "full" if full else "",
        },
        {
            "label": "Idle VCs",
            "value": _names(idle, "used under 25% of their reservation")[0],
            "detail": _names(idle, "used under 25% of their reservation")[1],
            "cls": "warn" if idle else "ok",
        },
        {
            "label": "Lent to opportunistic",
            "value": f"{t.gpu_hours_opportunistic:.0f} GPU-h",
            "detail": f"{t.gpus_lent_now} GPUs now; {t.preempted_gpu_hours:.1f} GPU-h lost to preemption",
            "cls": "",
        },
    ]
    if frag is not None:
        cards.append(
            {
                "label": "Free GPUs now",
                "value": str(frag.free_gpus),
                "detail": f"{frag.free_on_whole_nodes} on whole nodes, {frag.stranded_gpus} scattered",
                "cls": "warn" if frag.stranded_gpus > frag.free_on_whole_nodes else "",
            }
        )
    return cards


def report_colors(inputs: ReportInputs) -> dict[str, str]:
    vcs = [v.name for v in inputs.quota.vcs]
    if inputs.cluster is not None:
        vcs = sorted(set(vcs) | set(inputs.cluster.vcs))
    return vc_colors(vcs)


def make_plots(inputs: ReportInputs, with_map: bool = False) -> dict[str, bytes]:
    """The report's plots as PNG bytes, keyed by file stem."""
    quota = inputs.quota
    colors = report_colors(inputs)
    reserved = {v.name: v.gpus_reserved for v in quota.vcs}
    series = usage_series(inputs.segments, quota.since, quota.until)
    delays: dict[str, list[float]] = {v.name: [] for v in quota.vcs}
    for job in inputs.jobs:
        d = queue_delay_s(job)
        if d is not None and job.start_time is not None and quota.since <= job.start_time < quota.until:
            delays.setdefault(job.vc, []).append(d)
    plots = {
        "gpus-in-use": plot_utilization(series, quota.totals.gpus, colors, reserved),
        "queuing-delay": plot_queue_cdf(delays, colors),
        "qos-rate": plot_qos_rates(quota, colors),
    }
    if with_map and inputs.cluster is not None:
        plots["gpu-map"] = plot_gpu_map(inputs.cluster, colors)
    return plots


def write_plots(inputs: ReportInputs, directory: Path) -> list[Path]:
    """Write every plot (and the GPU map) as PNG files into ``directory``, created when missing."""
    from hivebatch.errors import HivebatchError

    try:
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name, png in make_plots(inputs, with_map=True).items():
            path = directory / f"{name}.png"
            path.write_bytes(png)
            written.append(path)
    except OSError as exc:
        raise HivebatchError(f"cannot write plots into {directory}: {exc.strerror or exc}") from None
    return written


def _job_cells(j: JobRow) -> dict[str, Any]:
    """The columns every job list of the page starts with."""
    return {"job": j.job_id, "user": j.user, "vc": j.vc, "qos": j.qos, "gpus": j.gpus}


def _missed_rows(quota: QuotaReport) -> list[dict[str, Any]]:
    """The jobs that missed their ECT, latest first, as rows for the template."""
    return [
        {
            **_job_cells(j),
            "ect": fmt_time(j.ect),
            "end": fmt_time(j.end_time) if j.end_time else f"not finished ({j.state})",
            "late": fmt_duration(((j.end_time or quota.until) - j.ect).total_seconds()) if j.ect else "-",
        }
        for j in sorted(quota.missed_jobs, key=lambda j: _lateness(j, quota.until), reverse=True)[:LIST_LIMIT]
    ]


def _waiting_rows(quota: QuotaReport) -> list[dict[str, Any]]:
    """The jobs still waiting at the end of the window, as rows for the template."""
    return [
        {
            **_job_cells(j),
            "state": j.state,
            "waited": fmt_duration((quota.until - j.submit_time).total_seconds()),
            "reason": j.reason or "-",
        }
        for j in quota.waiting_jobs[:LIST_LIMIT]
    ]


def _template() -> jinja2.Template:
    """The report's Jinja template; a missing one is a broken install, said in one line."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    try:
        return env.get_template(TEMPLATE_NAME)
    except jinja2.TemplateNotFound:
        from hivebatch.errors import HivebatchError

        raise HivebatchError(
            f"the report template {TEMPLATE_NAME} is missing from {template_dir()}: reinstall hivebatch"
        ) from None


def render_html(inputs: ReportInputs) -> str:
    quota = inputs.quota
    colors = report_colors(inputs)
    vcs = list(colors)
    pngs = make_plots(inputs)
    plots = {
        "utilization": _b64(pngs["gpus-in-use"]),
        "queue": _b64(pngs["queuing-delay"]),
        "qos": _b64(pngs["qos-rate"]),
    }
    frag = inputs.cluster.fragmentation() if inputs.cluster is not None else None
    usage_t, wait_t = quota_tables(quota)
    missed = _missed_rows(quota)
    waiting = _waiting_rows(quota)
    template = _template()
    return template.render(
        title=inputs.title,
        version=__version__,
        since=fmt_time(quota.since),
        until=fmt_time(quota.until),
        window_hours=f"{quota.totals.window_hours:.1f}",
        generated=fmt_time(quota.until),
        cards=honest(
            _headline(quota, frag), inputs.cluster.counts()["bad"] if inputs.cluster is not None else 0
        ),
        usage=_table_ctx(usage_t),
        wait=_table_ctx(wait_t),
        users=_table_ctx(users_table(inputs.users[:USERS_LIMIT])),
        users_total=len(inputs.users),
        missed=missed,
        missed_total=len(quota.missed_jobs),
        waiting=waiting,
        waiting_total=len(quota.waiting_jobs),
        now_reasons=[f"{v.name}: {v.now.reason}." for v in quota.vcs if v.now is not None and v.now.reason],
        classes=GUARANTEED_CLASSES,
        plots=plots,
        colors=[{"vc": vc, "color": colors[vc]} for vc in vcs],
        opp_color=OPPORTUNISTIC_COLOR,
        cluster=_map_ctx(inputs.cluster, colors) if inputs.cluster is not None else None,
        cluster_taken_at=fmt_time(inputs.cluster_taken_at) if inputs.cluster_taken_at else None,
        cluster_source=inputs.cluster_source,
        stale_gpus=inputs.cluster.stale_gpus if inputs.cluster is not None else 0,
        frag=frag,
        verdict_styles=VERDICT_STYLE,
        notes=inputs.notes,
    )
