"""Shared CLI plumbing: one clear line for every user-fixable error, never a traceback."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import click

from hivebatch.errors import HivebatchError


def run_cli(command: click.Command, args: list[str] | None = None, prog_name: str | None = None) -> None:
    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except HivebatchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except BrokenPipeError:
        sys.exit(0)
    # outside standalone mode click returns a command's ctx.exit(N) instead of exiting: hadmin vc check
    # exited 0 after printing its errors, which let a deployment it should gate go on
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)


class FiniteFloat(click.FloatRange):
    """A number, optionally bounded. click's FLOAT and FloatRange take 'nan' and 'inf' (a NaN passes
    every bound), on which a virtual clock, a rate or a deadline never ends: ``simulate --rate nan`` ran
    for ever."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "FLOAT"


#: a float option's type on every command
FINITE = FiniteFloat()


#: ``--config FILE``, the same on every command that reads etc/hivebatch.yaml
config_option = click.option(
    "--config",
    "config",
    metavar="FILE",
    help="hivebatch config (default: $HIVEBATCH_CONFIG, etc/hivebatch.yaml)",
)


def options(*decorators: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply click options listed top-down, as if each were written above the command in that order
    (a long option list then lives beside the command, named by what it configures)."""

    def apply(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply
