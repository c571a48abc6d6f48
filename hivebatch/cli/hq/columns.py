"""How ``hq`` prints rows: squeue-style ``-o`` formats, plain columns when piped, rich on a terminal."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hivebatch.cli.hq.rows import JobRow
from hivebatch.errors import HivebatchError
from hivebatch.state.formats import format_placement, format_slack, format_time
from hivebatch.submit.timefmt import format_duration


def _slack(r: Any) -> str:
    if r.state not in ("PENDING", "RUNNING"):
        return "-"
    if (
        r.expected_completion is not None
        and r.submit_time is not None
        and r.expected_completion <= r.submit_time
    ):
        # an ECT at submission (urgent: c = 0) means "as soon as possible"; a negative slack would read as late
        return "asap"
    return format_slack(r.slack_s)


def _gpus(row: JobRow) -> str:
    return f"{row.gpu_type}:{row.gpus}" if row.gpu_type else str(row.gpus)


def _placement(row: JobRow) -> str:
    """``node1:[0,1]``; a slice of one GPU as ``node2:[3] 8G/32G``."""
    if row.is_slice and row.placement:
        from hivebatch.sharing.integration import slice_text

        return slice_text(row.placement, int(row.gpu_mem_mib or 0), int(row.gpu_total_mib or 0))
    return format_placement(row.placement)


def _start(row: JobRow, now: dt.datetime) -> str:
    if row.state == "RUNNING" and row.start_time:
        return format_time(row.start_time, now)
    start = row.expected_start
    if start is not None:
        return "now" if start <= now else format_time(start, now)
    return format_time(row.start_time, now) if row.start_time else "-"


def _start_time(row: JobRow, now: dt.datetime) -> str:
    """squeue's %S (local time, to the second); a pending job's from hivebatch's prediction, as Slurm has
    none for a job the plugin holds (N/A), else Slurm's own (a --begin time)."""
    if row.pending:
        start = max(row.predicted_start, now) if row.predicted_start else row.expected_start
    else:
        start = row.start_time
    if start is None:
        return "N/A"
    return slurm_time_text(start.replace(tzinfo=dt.UTC).astimezone(), os.environ.get("SLURM_TIME_FORMAT"))


def slurm_time_text(when: dt.datetime, time_format: str | None, today: dt.date | None = None) -> str:
    """A local time as Slurm's commands print it under SLURM_TIME_FORMAT (src/common/parse_time.c
    slurm_make_time_str): ISO unless it is ``relative`` or a strftime format under 32 characters."""
    fmt = "%Y-%m-%dT%H:%M:%S"
    if time_format == "relative":
        fmt = _relative_format(when, today or dt.date.today())
    elif time_format and time_format != "standard" and "%" in time_format and len(time_format) < 32:
        fmt = time_format
    return when.strftime(fmt)


def _relative_format(when: dt.datetime, today: dt.date) -> str:
    """_relative_date_fmt: days apart counted as 1000 × year + day of the year, as Slurm counts them
    (so 31 December to 1 January is far)."""

    def day(d: dt.date) -> int:
        return 1000 * d.year + d.timetuple().tm_yday - 1

    distance = day(when.date()) - day(today)
    if distance == -1:
        return "Ystday %H:%M"
    if distance == 0:
        return "%H:%M:%S"
    if distance == 1:
        return "Tomorr %H:%M"
    if abs(distance) > 365:
        return "%-d %b %Y"
    if distance < -1 or distance > 6:
        return "%-d %b %H:%M"
    return "%a %H:%M"


def _nodelist_reason(row: JobRow) -> str:
    """squeue's %R: a pending job's reason in parentheses (hivebatch's for its own jobs, Slurm's code for
    the others, as squeue shows it), else the nodes it runs on."""
    if row.pending:
        reason = row.reason if row.hivebatch else row.slurm_reason
        return f"({reason})" if reason else ""
    from hivebatch.slurm.parse import compress_hostlist

    return compress_hostlist(row.nodes or list(row.placement))


def _end(row: JobRow, now: dt.datetime) -> str:
    if row.end_time and not (row.pending or row.state == "RUNNING"):
        return format_time(row.end_time, now)
    return format_time(row.predicted_end, now)


def _elapsed(row: JobRow, now: dt.datetime) -> str:
    if not row.start_time:
        return "0:00"
    end = row.end_time if row.end_time and row.state != "RUNNING" else now
    return format_duration((end - row.start_time).total_seconds())


def _reason(row: JobRow) -> str:
    # a running job's only reason is its owner's update refused in the last hour (squeue shows None)
    return row.reason or ""


@dataclass(frozen=True)
class Field:
    header: str
    get: Callable[[JobRow, dt.datetime], str]
    letter: str | None = None
    justify: str = "left"


FIELDS: dict[str, Field] = {
    "jobid": Field("JOBID", lambda r, n: r.display_id or str(r.job_id), "i", "right"),
    "user": Field("USER", lambda r, n: r.user or "", "u"),
    "vc": Field("VC", lambda r, n: r.vc or "", "a"),
    "class": Field("CLASS", lambda r, n: r.qos or "", "q"),
    "name": Field("NAME", lambda r, n: r.name or "", "j"),
    "st": Field("ST", lambda r, n: r.state_code, "t"),
    "state": Field("STATE", lambda r, n: r.state, "T"),
    "gpus": Field("GPUS", lambda r, n: _gpus(r), "b", "right"),
    "placement": Field("PLACEMENT", lambda r, n: _placement(r), "N"),
    "nodes": Field("NODES", lambda r, n: str(len(r.placement)) if r.placement else "-", "D", "right"),
    "start": Field("START", _start, "S"),
    "end": Field("END", _end, "e"),
    "slack": Field("SLACK", lambda r, n: _slack(r), None, "right"),
    "time": Field("TIME", _elapsed, "M", "right"),
    "limit": Field(
        "TIME_LIMIT", lambda r, n: format_duration(r.time_limit_s) if r.time_limit_s else "-", "l", "right"
    ),
    "submit": Field("SUBMIT", lambda r, n: format_time(r.submit_time, n), "V"),
    "hbstate": Field("HB_STATE", lambda r, n: r.hivebatch_state or "-", None),
    "reason": Field("REASON", lambda r, n: _reason(r), "R"),
    "start_time": Field("START_TIME", _start_time),
    "nodelist_reason": Field("NODELIST(REASON)", lambda r, n: _nodelist_reason(r)),
}
DEFAULT_FIELDS = (
    "jobid",
    "user",
    "vc",
    "class",
    "name",
    "st",
    "gpus",
    "placement",
    "start",
    "end",
    "slack",
    "reason",
)
BY_LETTER = {f.letter: name for name, f in FIELDS.items() if f.letter}
_PERCENT = re.compile(r"%(\.?)(\d*)([A-Za-z%])")


@dataclass(frozen=True)
class Column:
    field: str
    width: int | None = None  # None = as wide as needed
    right: bool = False


def parse_format(text: str) -> tuple[list[str | Column], bool]:
    """``-o``: squeue's ``%.10i %u …`` style, or a comma list of field names (``jobid,vc:8,placement``).

    Returns the pieces (literal text or columns) and whether literal text separates them itself.
    """
    if "%" in text:
        pieces: list[str | Column] = []
        pos = 0
        for m in _PERCENT.finditer(text):
            if m.start() > pos:
                pieces.append(text[pos : m.start()])
            dot, width, letter = m.groups()
            if letter == "%":
                pieces.append("%")
            else:
                name = BY_LETTER.get(letter)
                if name is None:
                    known = " ".join(f"%{k}={v}" for k, v in sorted(BY_LETTER.items()))
                    raise HivebatchError(f"-o/--format: unknown field %{letter} (known: {known})")
                pieces.append(Column(name, int(width) if width else None, bool(dot)))
            pos = m.end()
        if pos < len(text):
            pieces.append(text[pos:])
        return pieces, True
    cols: list[str | Column] = []
    for part in text.split(","):
        name, _, width = part.strip().partition(":")
        key = name.lower()
        if key not in FIELDS:
            raise HivebatchError(f"-o/--format: unknown field {name!r} (known: {', '.join(FIELDS)})")
        try:
            w = int(width) if width else None
        except ValueError:
            raise HivebatchError(f"-o/--format: width of {name!r} must be a number") from None
        cols.append(Column(key, w, FIELDS[key].justify == "right"))
    return cols, False


def _fit(value: str, width: int | None, right: bool) -> str:
    if width is None:
        return value
    value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def render_plain(
    rows: list[JobRow], pieces: list[str | Column], literal_sep: bool, header: bool, now: dt.datetime
) -> str:
    """Columns padded to their widest cell (or the width asked for), like squeue's output."""
    cols = [p for p in pieces if isinstance(p, Column)]
    cells = [[FIELDS[c.field].get(r, now) for c in cols] for r in rows]
    widths: list[int] = []
    for i, c in enumerate(cols):
        if c.width is not None:
            widths.append(c.width)
        else:
            widths.append(
                max([len(FIELDS[c.field].header) if header else 0] + [len(row[i]) for row in cells])
            )
    lines: list[str] = []
    table = ([[FIELDS[c.field].header for c in cols]] if header else []) + cells
    for values in table:
        out: list[str] = []
        i = 0
        last_col = len(cols) - 1
        for p in pieces:
            if isinstance(p, str):
                out.append(p)
                continue
            width = None if (i == last_col and p.width is None and not p.right) else widths[i]
            out.append(_fit(values[i], width, p.right))
            if not literal_sep and i < last_col:
                out.append(" ")
            i += 1
        lines.append("".join(out).rstrip())
    return "\n".join(lines)


def render_rich(rows: list[JobRow], fields: list[str], now: dt.datetime, title: str | None = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    styles = {"R": "green", "PD": "yellow", "CD": "dim", "F": "red", "CA": "dim", "TO": "red"}
    table = Table(box=box.SIMPLE_HEAD, title=title, pad_edge=False)
    for name in fields:
        f = FIELDS[name]
        table.add_column(f.header, justify="right" if f.justify == "right" else "left",
                         overflow="fold", no_wrap=name not in ("reason", "placement"))  # fmt: skip
    for r in rows:
        # Text, not markup: a job named "[/]" by any user stopped every hq on a terminal (rich's MarkupError)
        table.add_row(*[Text(FIELDS[n].get(r, now)) for n in fields], style=styles.get(r.state_code))
    Console().print(table)
