"""``hadmin``: the administrator's commands. Subcommands live in their own modules, imported on use."""

from __future__ import annotations

import click

from hivebatch.cli.common import run_cli
from hivebatch.cli.hivebatch.main import LazyGroup

# name -> "module:attribute" of a click command or group
HADMIN_COMMANDS: dict[str, str] = {
    "slurm-config": "hivebatch.cli.hadmin.slurmconf:slurm_config",
    "report": "hivebatch.cli.hadmin.report:report",
    "cluster": "hivebatch.cli.hadmin.cluster:cluster",
    "vc": "hivebatch.cli.hadmin.vc:vc",
    "events": "hivebatch.cli.hadmin.events:events",
    "profile": "hivebatch.cli.hadmin.profile:profile",
}


class HadminGroup(LazyGroup):
    table = HADMIN_COMMANDS


@click.group(cls=HadminGroup)
def cli() -> None:
    """Administer hivebatch: reports, cluster map, VC checks, Slurm config, profiles."""


def main() -> None:
    run_cli(cli, prog_name="hadmin")
