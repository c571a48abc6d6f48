"""Quota, user and event reports as tables, CSV and JSON-ready dicts."""

from __future__ import annotations

from typing import Any

from hivebatch.reports.gpumap import Fragmentation
from hivebatch.reports.rows import GUARANTEED_CLASSES, EventRow
from hivebatch.reports.tables import TextTable, to_csv
from hivebatch.reports.timeutil import fmt_duration, fmt_time
from hivebatch.reports.usage import ClassRate, QuotaReport
from hivebatch.reports.users import UserReport
from hivebatch.userlimits import StrictLine

VERDICT_STYLE = {"starved": "bold red", "idle": "yellow", "full": "cyan", "ok": "green"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _h(x: float) -> str:
    return f"{x:.1f}"


def _iso(x: Any) -> Any:
    return x.isoformat() if hasattr(x, "isoformat") else x


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def _rate_dict(r: ClassRate) -> dict[str, Any]:
    return {"met": r.met, "total": r.total, "rate": _round(r.rate, 4)}


def window_line(rep: QuotaReport) -> str:
    t = rep.totals
    return (
        f"Window {fmt_time(rep.since)} → {fmt_time(rep.until)} UTC ({t.window_hours:.1f} h), "
        f"{t.gpus} GPUs, {t.gpu_hours_capacity:.0f} GPU-h available"
    )


def _usage_table(rep: QuotaReport) -> TextTable:
    """GPU-hours, run/pending counts and the verdict per VC, with the cluster's totals."""
    t = rep.totals
    usage = TextTable(
        title="GPU usage per VC",
        headers=[
            "VC",
            "cells",
            "GPUs",
            "GPU-h guar",
            "GPU-h opp",
            "of reserv.",
            "run",
            "pending",
            "used now",
            "status",
        ],
        right={2, 3, 4, 5, 6, 7, 8},
    )
    for r, vc in enumerate(rep.vcs):
        status = vc.verdict + (f": {vc.verdict_detail}" if vc.verdict_detail else "")
        usage.rows.append(
            [
                vc.name,
                vc.cells_text,
                str(vc.gpus_reserved),
                _h(vc.gpu_hours_guaranteed),
                _h(vc.gpu_hours_opportunistic),
                _pct(vc.reservation_share),
                str(vc.jobs_run),
                str(vc.jobs_pending),
                vc.now_text,
                status,
            ]
        )
        usage.styles[(r, 9)] = VERDICT_STYLE.get(vc.verdict, "")
    usage.footer = [
        "total",
        "",
        str(t.gpus),
        _h(t.gpu_hours_guaranteed),
        _h(t.gpu_hours_opportunistic),
        _pct(t.utilization),
        str(t.jobs_run),
        str(t.jobs_pending),
        "",
        "utilisation of all GPUs",
    ]
    return usage


def _wait_table(rep: QuotaReport) -> TextTable:
    """Queue waits, deadline rates and preemptions per VC, with the cluster's totals."""
    t = rep.totals
    wait = TextTable(
        title="Waiting and deadlines per VC",
        headers=[
            "VC",
            "mean wait",
            "p95 wait",
            "private est.",
            "excess",
            *GUARANTEED_CLASSES,
            "missed ECT",
            "preempted",
        ],
        right={1, 2, 3, 4, 5, 6, 7, 8},
    )
    for r, vc in enumerate(rep.vcs):
        excess = (
            "-"
            if vc.excess_queue_s is None
            else ("+" if vc.excess_queue_s > 0 else "") + fmt_duration(vc.excess_queue_s)
        )
        wait.rows.append(
            [
                vc.name,
                fmt_duration(vc.mean_queue_s),
                fmt_duration(vc.p95_queue_s),
                fmt_duration(vc.private_queue_s),
                excess,
                *[vc.qos.get(c, ClassRate()).text() for c in GUARANTEED_CLASSES],
                str(vc.missed_ect),
                f"{vc.preemptions} ({_h(vc.preempted_gpu_hours)} GPU-h)",
            ]
        )
        if vc.missed_ect:
            wait.styles[(r, 8)] = "bold red"
    wait.footer = [
        "total",
        "",
        "",
        "",
        "",
        *[t.qos.get(c, ClassRate()).text() for c in GUARANTEED_CLASSES],
        str(t.missed_ect),
        f"{t.preemptions} ({_h(t.preempted_gpu_hours)} GPU-h)",
    ]
    return wait


def quota_tables(rep: QuotaReport) -> list[TextTable]:
    return [_usage_table(rep), _wait_table(rep)]


def quota_notes(rep: QuotaReport, frag: Fragmentation | None = None) -> list[str]:
    """The lines under the quota tables; ``frag`` adds where the free GPUs are (controller's last cycle)."""
    t = rep.totals
    overall = t.qos_overall
    notes = [window_line(rep)]
    for v in rep.vcs:
        if v.now is not None and v.now.reason:
            notes.append(f"{v.name} now: {v.now.reason}.")
    if overall.total:
        notes.append(
            f"Deadlines: {overall.met} of {overall.total} jobs met their ECT ({_pct(overall.rate)}); "
            "a job whose ECT is its submission (urgent) counts when it started within 2 minutes."
        )
    notes.append(
        f"Opportunistic: {t.gpu_hours_opportunistic:.1f} GPU-h lent to opportunistic work, "
        f"{t.gpus_lent_now:g} GPUs lent now; {t.gpu_hours_guaranteed:.1f} GPU-h guaranteed work."
    )
    if t.gpu_hours_colocated > 0:
        extra = 100 * t.gpu_hours_colocated / t.gpu_hours_guaranteed if t.gpu_hours_guaranteed else 0.0
        notes.append(
            f"Co-located: {t.gpu_hours_colocated:.1f} GPU-h of opportunistic GPU slices ran on the idle part "
            f"of GPUs guaranteed work held ({extra:.1f}% on top of the guaranteed GPU-h)."
        )
    if rep.missed_jobs:
        listed = ", ".join(f"{j.job_id} ({j.user}/{j.vc}/{j.qos})" for j in rep.missed_jobs[:10]) + (
            " …" if len(rep.missed_jobs) > 10 else ""
        )
        notes.append(f"Missed their ECT: {listed}")
    if rep.waiting_jobs:
        shown = []
        for j in rep.waiting_jobs[:10]:
            waited = fmt_duration((rep.until - j.submit_time).total_seconds())
            shown.append(
                f"{j.job_id} ({j.user}/{j.vc}/{j.qos}, {j.gpus} GPUs, {waited}"
                + (f": {j.reason})" if j.reason else ")")
            )
        more = f" … and {len(rep.waiting_jobs) - 10} more" if len(rep.waiting_jobs) > 10 else ""
        notes.append("Waiting now: " + "; ".join(shown) + more)
    if frag is not None:
        where = f"Free GPUs now: {frag.summary()}"
        if frag.partly_used_nodes:
            where += "; fragmented on " + ", ".join(f"{n} ({k} free)" for n, k in frag.partly_used_nodes[:8])
        if frag.bad_nodes:
            where += "; bad nodes: " + ", ".join(frag.bad_nodes)
        notes.append(where + ".")
    return notes


def quota_dict(rep: QuotaReport) -> dict[str, Any]:
    t = rep.totals
    return {
        "since": _iso(rep.since),
        "until": _iso(rep.until),
        "window_hours": round(t.window_hours, 3),
        "vcs": [
            {
                "vc": v.name,
                "cells": v.cells,
                "gpus_reserved": v.gpus_reserved,
                "gpu_hours_guaranteed": round(v.gpu_hours_guaranteed, 3),
                "gpu_hours_opportunistic": round(v.gpu_hours_opportunistic, 3),
                "reservation_share": _round(v.reservation_share, 4),
                "jobs_run": v.jobs_run,
                "jobs_pending": v.jobs_pending,
                "oldest_pending_s": _round(v.oldest_pending_s, 1),
                "mean_queue_s": _round(v.mean_queue_s, 1),
                "p95_queue_s": _round(v.p95_queue_s, 1),
                "private_queue_s": _round(v.private_queue_s, 1),
                "excess_queue_s": _round(v.excess_queue_s, 1),
                "qos": {c: _rate_dict(r) for c, r in v.qos.items()},
                "missed_ect": v.missed_ect,
                "preemptions": v.preemptions,
                "preempted_gpu_hours": round(v.preempted_gpu_hours, 3),
                "verdict": v.verdict,
                "verdict_detail": v.verdict_detail,
                "now": None
                if v.now is None
                else {
                    "gpus_used": v.now.gpus_used,
                    "capacity": v.now.capacity,
                    "gpus_total": v.now.gpus_total,
                    "reason": v.now.reason,
                },
            }
            for v in rep.vcs
        ],
        "totals": {
            "gpus": t.gpus,
            "gpu_hours_capacity": round(t.gpu_hours_capacity, 3),
            "gpu_hours_guaranteed": round(t.gpu_hours_guaranteed, 3),
            "gpu_hours_opportunistic": round(t.gpu_hours_opportunistic, 3),
            "utilization": _round(t.utilization, 4),
            "jobs_run": t.jobs_run,
            "jobs_pending": t.jobs_pending,
            "qos": {c: _rate_dict(r) for c, r in t.qos.items()},
            "qos_overall": _rate_dict(t.qos_overall),
            "missed_ect": t.missed_ect,
            "preemptions": t.preemptions,
            "preempted_gpu_hours": round(t.preempted_gpu_hours, 3),
            "gpus_lent_now": t.gpus_lent_now,
            "colocated_gpu_hours": round(t.gpu_hours_colocated, 3),
        },
        "waiting_jobs": [
            {
                "job_id": j.job_id,
                "user": j.user,
                "vc": j.vc,
                "qos": j.qos,
                "gpus": j.gpus,
                "state": j.state,
                "submit": _iso(j.submit_time),
                "reason": j.reason,
            }
            for j in rep.waiting_jobs
        ],
        "missed_jobs": [
            {
                "job_id": j.job_id,
                "user": j.user,
                "vc": j.vc,
                "qos": j.qos,
                "ect": _iso(j.ect),
                "end": _iso(j.end_time),
            }
            for j in rep.missed_jobs
        ],
    }


QUOTA_CSV_HEADERS = [
    "vc", "cells", "gpus_reserved", "gpu_hours_guaranteed", "gpu_hours_opportunistic", "reservation_share",
    "jobs_run", "jobs_pending", "mean_queue_s", "p95_queue_s", "private_queue_s", "excess_queue_s",
    *[f"qos_{c}_met" for c in GUARANTEED_CLASSES], *[f"qos_{c}_total" for c in GUARANTEED_CLASSES],
    "missed_ect", "preemptions", "preempted_gpu_hours", "verdict",
]  # fmt: skip


def quota_csv(rep: QuotaReport) -> str:
    data = quota_dict(rep)
    rows: list[list[Any]] = []
    for v in data["vcs"]:
        rows.append(
            [
                v["vc"],
                " ".join(f"{t}={n}" for t, n in v["cells"].items()),
                v["gpus_reserved"],
                v["gpu_hours_guaranteed"],
                v["gpu_hours_opportunistic"],
                v["reservation_share"],
                v["jobs_run"],
                v["jobs_pending"],
                v["mean_queue_s"],
                v["p95_queue_s"],
                v["private_queue_s"],
                v["excess_queue_s"],
                *[v["qos"].get(c, {}).get("met", 0) for c in GUARANTEED_CLASSES],
                *[v["qos"].get(c, {}).get("total", 0) for c in GUARANTEED_CLASSES],
                v["missed_ect"],
                v["preemptions"],
                v["preempted_gpu_hours"],
                v["verdict"],
            ]
        )
    t = data["totals"]
    rows.append(
        [
            "TOTAL", "", t["gpus"], t["gpu_hours_guaranteed"], t["gpu_hours_opportunistic"], t["utilization"],
            t["jobs_run"], t["jobs_pending"], "", "", "", "",
            *[t["qos"].get(c, {}).get("met", 0) for c in GUARANTEED_CLASSES],
            *[t["qos"].get(c, {}).get("total", 0) for c in GUARANTEED_CLASSES],
            t["missed_ect"], t["preemptions"], t["preempted_gpu_hours"], "",
        ]
    )  # fmt: skip
    return to_csv(QUOTA_CSV_HEADERS, [["" if x is None else x for x in row] for row in rows])


USER_HEADERS = ["user", "VC", "GPU-h", "guar", "opp", "run", "pending", "mean wait", "met ECT", "preempted"]


def users_table(users: list[UserReport], with_flags: bool = True) -> TextTable:
    """Per-user table; without flags the caller lists them below (long sentences make wide columns)."""
    table = TextTable(
        title="GPU usage per user",
        headers=[*USER_HEADERS, "flags"] if with_flags else list(USER_HEADERS),
        right={2, 3, 4, 5, 6, 7, 8, 9},
    )
    for r, u in enumerate(users):
        table.rows.append(
            [
                u.user,
                ", ".join(u.vcs),
                _h(u.gpu_hours),
                _h(u.gpu_hours_guaranteed),
                _h(u.gpu_hours_opportunistic),
                str(u.jobs_run),
                str(u.jobs_pending),
                fmt_duration(u.mean_queue_s),
                u.qos.text(),
                str(u.preemptions),
                *(["; ".join(u.flags) or "-"] if with_flags else []),
            ]
        )
        if u.flags and with_flags:
            table.styles[(r, 10)] = "yellow"
    return table


def _of(value: float | int, limit: float | int | None, fmt: str) -> str:
    return format(value, fmt) + (f" / {format(limit, fmt)}" if limit is not None else "")


def strict_table(lines: list[StrictLine]) -> TextTable:
    """Use of the strict classes over the last 7 days against each user's limits (user_limits:)."""
    table = TextTable(
        title="Strict classes per user: the 7 days up to the end of the window (use / limit)",
        headers=["user", "VC", "class", "GPU-h", "holding GPUs", "status"],
        right={3, 4},
    )
    for r, line in enumerate(lines):
        limit = line.limit
        table.rows.append(
            [
                line.user,
                line.vc,
                line.cls,
                _of(line.use.gpu_hours, limit.gpu_hours_per_week if limit else None, ".1f"),
                _of(line.use.running, limit.running_jobs if limit else None, "d"),
                "at limit: new jobs refused" if line.over else ("within" if limit else "no limit"),
            ]
        )
        if line.over:
            table.styles[(r, 5)] = "yellow"
    return table


def strict_dicts(lines: list[StrictLine]) -> list[dict[str, Any]]:
    return [
        {
            "user": line.user,
            "vc": line.vc,
            "class": line.cls,
            "gpu_hours": round(line.use.gpu_hours, 3),
            "gpu_hours_limit": line.limit.gpu_hours_per_week if line.limit else None,
            "holding_gpus": line.use.running,
            "holding_gpus_limit": line.limit.running_jobs if line.limit else None,
            "over": line.over,
        }
        for line in lines
    ]


def users_flag_lines(users: list[UserReport]) -> list[str]:
    lines = [f"  {u.user}: {flag}" for u in users for flag in u.flags]
    return ["Waste flags:", *lines] if lines else ["Waste flags: none"]


def users_dicts(users: list[UserReport]) -> list[dict[str, Any]]:
    return [
        {
            "user": u.user,
            "vcs": u.vcs,
            "gpu_hours": round(u.gpu_hours, 3),
            "gpu_hours_guaranteed": round(u.gpu_hours_guaranteed, 3),
            "gpu_hours_opportunistic": round(u.gpu_hours_opportunistic, 3),
            "jobs_run": u.jobs_run,
            "jobs_pending": u.jobs_pending,
            "mean_queue_s": _round(u.mean_queue_s, 1),
            "qos": _rate_dict(u.qos),
            "missed_ect": u.missed_ect,
            "preemptions": u.preemptions,
            "preempted_gpu_hours": round(u.preempted_gpu_hours, 3),
            "median_limit_use": _round(u.median_limit_use, 4),
            "multinode_fit_one": u.multinode_fit_one,
            "flags": u.flags,
        }
        for u in users
    ]


USERS_CSV_HEADERS = [
    "user", "vcs", "gpu_hours", "gpu_hours_guaranteed", "gpu_hours_opportunistic", "jobs_run", "jobs_pending",
    "mean_queue_s", "qos_met", "qos_total", "missed_ect", "preemptions", "preempted_gpu_hours",
    "median_limit_use", "multinode_fit_one", "flags",
]  # fmt: skip


def users_csv(users: list[UserReport]) -> str:
    rows = []
    for d in users_dicts(users):
        rows.append(
            [
                d["user"], " ".join(d["vcs"]), d["gpu_hours"], d["gpu_hours_guaranteed"], d["gpu_hours_opportunistic"],
                d["jobs_run"], d["jobs_pending"], d["mean_queue_s"], d["qos"]["met"], d["qos"]["total"],
                d["missed_ect"], d["preemptions"], d["preempted_gpu_hours"], d["median_limit_use"],
                d["multinode_fit_one"], " | ".join(d["flags"]),
            ]
        )  # fmt: skip
    return to_csv(USERS_CSV_HEADERS, [["" if x is None else x for x in row] for row in rows])


def events_table(events: list[EventRow]) -> TextTable:
    table = TextTable(title="", headers=["time (UTC)", "job", "user", "VC", "event", "message"])
    for e in events:
        table.rows.append(
            [
                e.time.strftime("%Y-%m-%d %H:%M:%S"),
                e.job_id or "-",
                e.user or "-",
                e.vc or "-",
                e.kind,
                e.message,
            ]
        )
    return table


def events_dicts(events: list[EventRow]) -> list[dict[str, Any]]:
    return [
        {
            "time": e.time.isoformat(),
            "job_id": e.job_id,
            "user": e.user,
            "vc": e.vc,
            "kind": e.kind,
            "message": e.message,
        }
        for e in events
    ]


def events_csv(events: list[EventRow]) -> str:
    rows = [
        [d["time"], d["job_id"] or "", d["user"] or "", d["vc"] or "", d["kind"], d["message"]]
        for d in events_dicts(events)
    ]
    return to_csv(["time", "job_id", "user", "vc", "kind", "message"], rows)
