"""glibc's ``getopt_long``, as Slurm's commands use it, so hsub and hq read argv exactly as sbatch and
squeue do: unique abbreviations of long names (aliases of one option count once), ``--name=value`` or
the next word as a required value whatever it looks like, optional values only inline, bundled short
flags (``-Hv``), ``--`` ending the options and, with ``stop_at_positional`` (a ``+`` options string),
the first plain word ending them too. Messages are glibc's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

NO_ARG, REQUIRED, OPTIONAL = 0, 1, 2


@dataclass(frozen=True)
class Spec:
    name: str  # the option's key (its first long name)
    arg: int = NO_ARG


@dataclass(frozen=True)
class Found:
    """One option as read: its key, its value (None for a flag) and the argv words it came from."""

    spec: Spec
    value: str | None
    words: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """Long names in the command's table order (several names may share a Spec: aliases), short letters,
    and names resolved only when none of the first group matches (a wrapper's own options)."""

    longs: tuple[tuple[str, Spec], ...]
    shorts: dict[str, Spec]
    own: tuple[tuple[str, Spec], ...] = ()

    def resolve(self, name: str, spelled: str) -> tuple[Spec | None, str | None]:
        for group in (self.longs, self.own):
            for long_name, spec in group:
                if long_name == name:
                    return spec, None
        for group in (self.longs, self.own):
            hits = [(n, s) for n, s in group if n.startswith(name)]
            if not hits:
                continue
            if len({s for _, s in hits}) == 1:
                return hits[0][1], None
            listed = " ".join(f"'--{n}'" for n, _ in hits)
            return None, f"option '--{spelled}' is ambiguous; possibilities: {listed}"
        return None, f"unrecognized option '--{spelled}'"


def _long(table: Table, tok: str, tokens: Sequence[str], i: int) -> tuple[Found | str | None, int]:
    name, eq, inline = tok[2:].partition("=")
    spec, why = table.resolve(name, tok[2:])
    if spec is None:
        return why, i
    if eq and spec.arg == NO_ARG:
        return f"option '--{spec.name}' doesn't allow an argument", i
    if eq or spec.arg != REQUIRED:
        return Found(spec, inline if eq else None, (tok,)), i
    if i < len(tokens):
        return Found(spec, tokens[i], (tok, tokens[i])), i + 1
    return f"option '--{spec.name}' requires an argument", i


def _short(table: Table, tok: str, tokens: Sequence[str], i: int) -> tuple[list[Found | str], int]:
    out: list[Found | str] = []
    for pos, letter in enumerate(tok[1:], start=2):
        spec = table.shorts.get(letter)
        if spec is None:
            out.append(f"invalid option -- '{letter}'")
        elif spec.arg == NO_ARG:
            out.append(Found(spec, None, (f"-{letter}",)))
        elif tok[pos:] or spec.arg == OPTIONAL:
            out.append(Found(spec, tok[pos:] or None, (f"-{letter}{tok[pos:]}",)))
            break
        elif i < len(tokens):
            out.append(Found(spec, tokens[i], (f"-{letter}", tokens[i])))
            return out, i + 1
        else:
            out.append(f"option requires an argument -- '{letter}'")
    return out, i


def getopt(
    tokens: Sequence[str], table: Table, stop_at_positional: bool
) -> Iterator[Found | str | list[str]]:
    """Options as ``Found``, problems as ``str``, plain words as ``list[str]`` (with stop_at_positional
    the first plain word comes with everything after it)."""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            yield list(tokens[i:])
            return
        if tok.startswith("--"):
            found, i = _long(table, tok, tokens, i)
            if found is not None:
                yield found
        elif tok.startswith("-") and len(tok) > 1:
            items, i = _short(table, tok, tokens, i)
            yield from items
        elif stop_at_positional:
            yield list(tokens[i - 1 :])
            return
        else:
            yield [tok]
