"""A number option takes a number: 'nan' and 'inf' (which click's FLOAT accepts, and a NaN passes
every range bound) are refused in one line. Seen: ``hivebatch simulate --rate nan`` ran for ever.

The options are only parsed here (``make_context``), so a regression fails instead of running."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from hivebatch.cli.common import FINITE, FiniteFloat
from hivebatch.cli.hadmin.main import cli as hadmin
from hivebatch.cli.hivebatch.main import cli as hivebatch


def _commands(group: click.Group, ctx: click.Context, path: str) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, f"{path} {name}")


def _parse(path: str, args: list[str]) -> click.Context:
    group = hivebatch if path.startswith("hivebatch") else hadmin
    ctx = click.Context(group)
    command = dict(_commands(group, ctx, path.split()[0]))[path]
    return command.make_context(path, args)


def test_every_float_option_of_every_command_is_a_finite_number() -> None:
    floats = []
    for group, name in ((hivebatch, "hivebatch"), (hadmin, "hadmin")):
        for path, command in _commands(group, click.Context(group), name):
            for param in command.params:
                if isinstance(param.type, click.types.FloatParamType):
                    floats.append((path, param.name, type(param.type).__name__))
    assert len(floats) >= 20
    assert [f for f in floats if f[2] != "FiniteFloat"] == []


@pytest.mark.parametrize("word", ["nan", "inf", "NaN", "1e999"])
@pytest.mark.parametrize(
    ("path", "args", "option"),
    [
        ("hivebatch simulate", ["--workload", "paper", "--rate"], "--rate"),
        ("hivebatch simulate", ["--workload", "paper", "--hours"], "--hours"),
        ("hivebatch controller run", ["--loop", "--interval"], "--interval"),
        ("hivebatch replay", ["--speedup"], "--speedup"),
        ("hadmin profile run", ["--timeout"], "--timeout"),
    ],
)
def test_a_number_option_refuses_what_is_no_finite_number(
    path: str, args: list[str], option: str, word: str
) -> None:
    with pytest.raises(click.BadParameter, match=f"^{word!r} is not a finite number.$") as refused:
        _parse(path, [*args, word])
    assert refused.value.param is not None and option in refused.value.param.opts


def test_bounds_still_hold_and_numbers_pass() -> None:
    assert FINITE.convert("2.5", None, None) == 2.5
    assert FiniteFloat(min=0.1).convert("0.5", None, None) == 0.5
    with pytest.raises(click.BadParameter, match="0.01 is not in the range x>=0.1"):
        _parse("hivebatch controller run", ["--loop", "--interval", "0.01"])
    assert _parse("hivebatch controller run", ["--loop", "--interval", "2"]).params["interval"] == 2.0
