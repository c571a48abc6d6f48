"""The ``hivebatch`` command: subcommand groups are imported only when used, to keep start-up fast."""

from __future__ import annotations

import importlib
from typing import Any

import click

from hivebatch import __version__
from hivebatch.cli.common import run_cli

# name -> "module:attribute" of a click command or group
SUBCOMMANDS: dict[str, str] = {
    "cells": "hivebatch.cli.hivebatch.cells:cells",
    "model": "hivebatch.cli.hivebatch.model:model",
    "controller": "hivebatch.cli.hivebatch.controller:controller",
    "simulate": "hivebatch.cli.hivebatch.simulate:simulate",
    "replay": "hivebatch.cli.hivebatch.replay:replay",
    "db": "hivebatch.cli.hivebatch.db:db",
    "config": "hivebatch.cli.hivebatch.config:config",
}


class LazyGroup(click.Group):
    table: dict[str, str] = SUBCOMMANDS

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.table)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.table.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command: Any = getattr(module, attr)
        return command


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="hivebatch")
def cli() -> None:
    """hivebatch: HiveD cells, QoS-aware placement and GPU sharing on top of Slurm."""


def main() -> None:
    run_cli(cli, prog_name="hivebatch")
