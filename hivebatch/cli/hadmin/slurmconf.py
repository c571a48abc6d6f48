"""``hadmin slurm-config``: write slurm.conf/gres.conf lines and sacctmgr commands from the cell config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from hivebatch.config import load_config
from hivebatch.jobsubmit import refusals_file
from hivebatch.slurmconf import NodeHardware
from hivebatch.slurmconf_files import ConfigOptions, config_files, merge_diff, write_files

FC = TypeVar("FC", bound=Callable[..., Any])


def _show_diff(site: Path, generated: str) -> None:
    """Warnings first (GPUs re-typed), then the unified diff of the site's slurm.conf after merging."""
    diff, warnings = merge_diff(site, generated)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(diff, nl=False)


# Every option of the command, in --help order; kept apart so the command reads as parse, call, print.
_OPTIONS: list[Callable[[FC], FC]] = [
    click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        help="hivebatch config (default: search path).",
    ),
    click.option(
        "--out", type=click.Path(file_okay=False), help="Write files into DIR instead of printing them."
    ),
    click.option(
        "--lab-dir",
        type=click.Path(file_okay=False),
        help="Write a complete config for the local lab rooted at DIR.",
    ),
    click.option(
        "--lab-port-offset",
        default=0,
        show_default=True,
        type=click.IntRange(0, 1000),
        help="Added to every lab port, so a second lab can run beside the first.",
    ),
    click.option("--cluster-name", default="hivebatch", show_default=True, help="Slurm ClusterName."),
    click.option(
        "--user",
        "users",
        multiple=True,
        metavar="USER=ACCOUNT[,ACCOUNT]",
        help="A user and their VC account(s).",
    ),
    click.option(
        "--operator",
        "operators",
        multiple=True,
        metavar="USER",
        help="User given AdminLevel=Operator (the controller).",
    ),
    click.option(
        "--shards/--no-shards",
        default=True,
        show_default=True,
        help="Offer GPU shards (1 per GiB of GPU memory).",
    ),
    click.option(
        "--cores-per-socket",
        default=8,
        show_default=True,
        type=click.IntRange(1, 1024),
        help="CoresPerSocket of every node (the lab fakes 8).",
    ),
    click.option(
        "--real-memory",
        default=64000,
        show_default=True,
        type=click.IntRange(1),
        help="RealMemory per node in MB.",
    ),
    click.option(
        "--device-dir",
        default=None,
        help="Directory of the nvidiaN device files (default /dev, lab: DIR/dev).",
    ),
    click.option(
        "--lab",
        "tuned",
        is_flag=True,
        help="Add the lab's timing (sched_interval=2, cred_expire=10) and default partition.",
    ),
    click.option(
        "--diff",
        "diff_with",
        type=click.Path(dir_okay=False, exists=True),
        metavar="SLURM_CONF",
        help="Show what merging hivebatch's lines changes in this slurm.conf (a unified diff); writes nothing.",
    ),
]


def _with_options(func: FC) -> FC:
    """Apply ``_OPTIONS`` as if each were stacked above ``func`` in list order."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


@click.command("slurm-config")
@_with_options
def slurm_config(
    config_path: str | None,
    out: str | None,
    lab_dir: str | None,
    lab_port_offset: int,
    cluster_name: str,
    users: tuple[str, ...],
    operators: tuple[str, ...],
    shards: bool,
    cores_per_socket: int,
    real_memory: int,
    device_dir: str | None,
    tuned: bool,
    diff_with: str | None,
) -> None:
    """Generate Slurm node/GRES lines and the accounts/QOS/users commands from the cell config.

    Every GPU gets its own GRES Type (g0, g1, ...) so hivebatch can pin exact GPUs; shards let a
    job share one GPU. Prints everything to stdout unless --out DIR is given.
    """
    _, data = load_config(config_path)
    opts = ConfigOptions(
        cluster_name=cluster_name,
        users=users,
        operators=operators,
        shards=shards,
        hardware=NodeHardware(cores_per_socket=cores_per_socket, real_memory_mb=real_memory),
        lab_dir=Path(lab_dir) if lab_dir else None,
        lab_port_offset=lab_port_offset,
        device_dir=device_dir,
        tuned=tuned,
        conf_dir=Path(out).resolve() if out else None,
    )
    files = config_files(data, opts)
    if diff_with:
        _show_diff(Path(diff_with), files["slurm.conf"][0])
        return
    if out is None:
        for name, (text, _) in files.items():
            click.echo(f"# ==> {name} <==")
            click.echo(text)
        return
    changed = write_files(Path(out), files)
    click.echo(f"{'wrote ' + ', '.join(changed) if changed else 'unchanged'} in {out}")
    notes = refusals_file(data).parent
    if not notes.is_dir():
        click.echo(
            f"note: create {notes} on the slurmctld host (install -d -o SLURMUSER -m 0755 {notes}): the plugin "
            "notes there the updates it refuses, so that hq can say why; without it they are only in slurmctld's log"
        )
