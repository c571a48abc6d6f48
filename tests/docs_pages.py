"""The console blocks of the docs pages: each ``$ `` command and the output lines shown after it."""

from __future__ import annotations

import re
from pathlib import Path

PROMPT = re.compile(r"(?:([a-z]+))?\$ |(root)# ")
ERROR_LINE = re.compile(r"(\S+: )?error:")


def console_steps(page: Path) -> list[tuple[str, str, list[str]]]:
    """(who, command, the output lines shown after it) of every ```console block: ``$ `` is the page's
    user (who is ""), ``bob$ `` the user bob, ``admin$ `` the administrator, ``root# `` root in the checkout."""
    out: list[tuple[str, str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        first = len(out)  # output shown before a block's first command belongs to no command
        for line in block.splitlines():
            prompt = PROMPT.match(line)
            if prompt:
                out.append((prompt.group(1) or prompt.group(2) or "", line[prompt.end() :], []))
            elif len(out) > first and line.strip() and line.strip() != "...":
                out[-1][2].append(line)
    return out


def console_commands(page: Path) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown after it) of every ``$ `` command of the page's console blocks."""
    return [(command, shown) for who, command, shown in console_steps(page) if not who]


def shows_error(shown: list[str]) -> bool:
    """Whether the page shows the command failing: a line of its output is an error (``error:``, ``hsub: error:``)."""
    return any(ERROR_LINE.match(line) for line in shown)


def shown_file(command: str) -> str | None:
    """The file ``cat FILE`` names when it names one plain file (no glob, pipe or second word): where it is not
    there yet, the page is showing a file the next commands use."""
    name = command.removeprefix("cat ")
    return name if command.startswith("cat ") and not set(name) & set("*?[ |;") else None


def _open(token: str) -> str:
    """The pattern a number-like token of a shown line leaves open (see shape_pattern)."""
    if token[0] in "+-":
        return r"[+-][\dsmhd]+"
    if token[0] == " ":
        return " +"
    if ":" in token:  # a clock time; one on another day than today is shown with its date (11-25 00:12)
        return r"(?:\d+-\d+ +)?\d+:\d+"
    return r"\d+"


def shape_pattern(line: str) -> re.Pattern[str]:
    """A shown output line with what changes from run to run left open: numbers (job ids, GPU indices,
    times, a clock time's date when it is not today's), their sign where one leads a column (``+0.3``,
    ``-1.2``), signed durations (``+51s``, ``-3m``) and the width of the blanks between columns; a line the
    page cuts short with ``…`` matches whatever follows (a host name, a path)."""
    line, cut = (line[:-1], ".*") if line.endswith("…") else (line, "")
    parts = re.split(r"([+-]\d+[smhd]\b|(?<!\S)[+-]\d+|\d+:\d+|\d+| +)", line)
    pattern = "".join((_open(p) if i % 2 else re.escape(p)) for i, p in enumerate(parts))
    return re.compile(pattern + cut)
