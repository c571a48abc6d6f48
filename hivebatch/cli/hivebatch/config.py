"""``hivebatch config check``: validate every section and key of the config."""

from __future__ import annotations

import click

from hivebatch.cli.common import config_option
from hivebatch.errors import ConfigError


@click.group()
def config() -> None:
    """Check the hivebatch configuration."""


@config.command()
@config_option
def check(config: str | None) -> None:
    """Validate every section and key; print each problem with its line, exit 1 on any."""
    from hivebatch.config import load_config
    from hivebatch.configcheck import check_config

    path, data = load_config(config)  # duplicate and unknown keys fail here, with their line
    problems, notes = check_config(path, data)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    click.echo(f"{path}: ok")
