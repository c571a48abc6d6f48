"""Tables that print as rich tables on a terminal and as aligned plain columns when piped."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import IO, Any


@dataclass
class TextTable:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    right: set[int] = field(default_factory=set)  # columns aligned right (numbers)
    footer: list[str] | None = None  # a totals row
    styles: dict[tuple[int, int], str] = field(default_factory=dict)  # (row, col) -> rich style

    def plain(self) -> str:
        rows = [self.headers, *self.rows] + ([self.footer] if self.footer else [])
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.headers))]
        lines = [self.title] if self.title else []
        for n, row in enumerate(rows):
            cells = [
                row[i].rjust(widths[i]) if i in self.right else row[i].ljust(widths[i])
                for i in range(len(row))
            ]
            lines.append("  ".join(cells).rstrip())
            if n == 0 or (self.footer and n == len(rows) - 2):
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def rich(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=self.title, title_justify="left", show_footer=self.footer is not None)
        for i, header in enumerate(self.headers):
            table.add_column(
                header,
                justify="right" if i in self.right else "left",
                footer=self.footer[i] if self.footer else "",
                overflow="fold",
            )
        for r, row in enumerate(self.rows):
            # Text, not markup: a value may be a user's or job's name, "[/]" included
            table.add_row(*[Text(v, style=self.styles.get((r, c), "")) for c, v in enumerate(row)])
        return table


def print_tables(
    tables: list[TextTable],
    out: IO[str] | None = None,
    notes: list[str] | None = None,
    terminal: bool | None = None,
) -> None:
    """Rich on a terminal, plain aligned columns when piped or redirected (``terminal`` forces one)."""
    from rich.console import Console

    console = Console(file=out, highlight=False, force_terminal=terminal, width=200 if terminal else None)
    if console.is_terminal if terminal is None else terminal:
        for table in tables:
            console.print(table.rich())
        for note in notes or []:
            console.print(note, markup=False)
        return
    chunks = [t.plain() for t in tables]
    text = "\n\n".join(chunks)
    if notes:
        text += "\n\n" + "\n".join(notes)
    console.file.write(text + "\n")


def to_csv(headers: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return buf.getvalue()
