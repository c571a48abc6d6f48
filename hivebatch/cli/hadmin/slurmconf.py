"""``hadmin slurm-config``: write slurm.conf/gres.conf lines and sacctmgr commands from the cell config."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from hivebatch.config import load_config
from hivebatch.jobsubmit import job_submit_lua
from hivebatch.slurmconf import (
    AccountingPlan,
    LabOptions,
    NodeHardware,
    accounting_script,
    cluster_layout,
    gres_conf,
    parse_user_specs,
    slurm_conf,
    slurmdbd_conf,
)


def _write_all(out: Path, files: dict[str, tuple[str, int]]) -> list[str]:
    """Write every file next to its target first, then rename, so a failure leaves the old set intact."""
    out.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[str, Path]] = []
    changed: list[str] = []
    try:
        for name, (text, mode) in files.items():
            target = out / name
            if target.exists() and target.read_text(encoding="utf-8") == text:
                continue
            fd, tmp_name = tempfile.mkstemp(dir=out, prefix=f".{name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp_name, mode)
            staged.append((name, Path(tmp_name)))
        for name, staged_path in staged:
            staged_path.replace(out / name)
            changed.append(name)
    finally:
        for _, leftover in staged:
            if leftover.exists():
                leftover.unlink()
    return changed


def _show_diff(site: Path, generated: str) -> None:
    """Warnings first (GPUs re-typed), then the unified diff of the site's slurm.conf after merging."""
    import difflib

    from hivebatch.slurmconf import merge_into

    current = site.read_text(encoding="utf-8", errors="replace")
    merged, warnings = merge_into(current, generated)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        merged.splitlines(keepends=True),
        str(site),
        f"{site} (with hivebatch)",
    )
    click.echo("".join(diff), nl=False)


@click.command("slurm-config")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="hivebatch config (default: search path).",
)
@click.option(
    "--out", type=click.Path(file_okay=False), help="Write files into DIR instead of printing them."
)
@click.option(
    "--lab-dir",
    type=click.Path(file_okay=False),
    help="Write a complete config for the local lab rooted at DIR.",
)
@click.option(
    "--lab-port-offset",
    default=0,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="Added to every lab port, so a second lab can run beside the first.",
)
@click.option("--cluster-name", default="hivebatch", show_default=True, help="Slurm ClusterName.")
@click.option(
    "--user", "users", multiple=True, metavar="USER=ACCOUNT[,ACCOUNT]", help="A user and their VC account(s)."
)
@click.option(
    "--operator",
    "operators",
    multiple=True,
    metavar="USER",
    help="User given AdminLevel=Operator (the controller).",
)
@click.option(
    "--shards/--no-shards",
    default=True,
    show_default=True,
    help="Offer GPU shards (1 per GiB of GPU memory).",
)
@click.option(
    "--cores-per-socket",
    default=8,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="CoresPerSocket of every node (the lab fakes 8).",
)
@click.option(
    "--real-memory",
    default=64000,
    show_default=True,
    type=click.IntRange(1),
    help="RealMemory per node in MB.",
)
@click.option(
    "--device-dir", default=None, help="Directory of the nvidiaN device files (default /dev, lab: DIR/dev)."
)
@click.option(
    "--lab",
    "tuned",
    is_flag=True,
    help="Add the lab's timing (sched_interval=2, cred_expire=10) and default partition.",
)
@click.option(
    "--diff",
    "diff_with",
    type=click.Path(dir_okay=False, exists=True),
    metavar="SLURM_CONF",
    help="Show what merging hivebatch's lines changes in this slurm.conf (a unified diff); writes nothing.",
)
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
    layout = cluster_layout(data)
    hw = NodeHardware(cores_per_socket=cores_per_socket, real_memory_mb=real_memory)
    lab = None
    if lab_dir:
        d = LabOptions(state_dir=Path(lab_dir).resolve())
        lab = LabOptions(
            state_dir=d.state_dir,
            cluster_name=cluster_name,
            ctld_port=d.ctld_port + lab_port_offset,
            dbd_port=d.dbd_port + lab_port_offset,
            db_port=d.db_port + lab_port_offset,
            node_base_port=d.node_base_port + lab_port_offset,
        )
    devices = device_dir or (f"{lab.state_dir}/dev" if lab else "/dev")
    plan = AccountingPlan(
        cluster=cluster_name,
        vcs=layout.vcs,
        users=parse_user_specs(users, layout.vcs),
        operators=list(operators),
    )
    files: dict[str, tuple[str, int]] = {
        "slurm.conf": (slurm_conf(layout, hw, shards=shards, lab=lab, tuned=tuned), 0o644),
        "gres.conf": (gres_conf(layout, hw, shards=shards, device_dir=devices), 0o644),
        "accounts.sh": (accounting_script(plan), 0o755),
        "job_submit.lua": (job_submit_lua(data, operators), 0o644),
    }
    if lab:
        files["slurmdbd.conf"] = (slurmdbd_conf(lab), 0o600)
    if diff_with:
        _show_diff(Path(diff_with), files["slurm.conf"][0])
        return
    if out is None:
        for name, (text, _) in files.items():
            click.echo(f"# ==> {name} <==")
            click.echo(text)
        return
    changed = _write_all(Path(out), files)
    click.echo(f"{'wrote ' + ', '.join(changed) if changed else 'unchanged'} in {out}")
