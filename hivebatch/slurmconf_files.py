"""The files ``hadmin slurm-config`` generates from the cell config, and how they reach the disk.

``hivebatch.slurmconf`` writes each file's text; this module assembles the whole set for one request
(a lab or a real cluster), writes it so a failure leaves the previous set intact, and shows what merging
hivebatch's lines into a site's own slurm.conf would change.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from hivebatch.jobsubmit import cli_filter_lua, job_submit_lua, slurm_conf_dir
from hivebatch.notice import parse_notice
from hivebatch.slurmconf import (
    AccountingPlan,
    LabOptions,
    NodeHardware,
    accounting_script,
    cluster_layout,
    gres_conf,
    merge_into,
    parse_user_specs,
    slurm_conf,
    slurmdbd_conf,
)


@dataclass(frozen=True)
class ConfigOptions:
    """What ``hadmin slurm-config`` was asked for, besides the cell config itself."""

    cluster_name: str = "hivebatch"
    users: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    shards: bool = True
    hardware: NodeHardware = field(default_factory=NodeHardware)
    lab_dir: Path | None = None
    lab_port_offset: int = 0
    device_dir: str | None = None
    tuned: bool = False
    #: where the files go (slurm.conf's directory on the cluster); None: printed, $SLURM_CONF's directory
    conf_dir: Path | None = None


def lab_options(lab_dir: Path, cluster_name: str, port_offset: int) -> LabOptions:
    """The lab rooted at ``lab_dir`` with every default port moved by ``port_offset``."""
    d = LabOptions(state_dir=lab_dir.resolve())
    return LabOptions(
        state_dir=d.state_dir,
        cluster_name=cluster_name,
        ctld_port=d.ctld_port + port_offset,
        dbd_port=d.dbd_port + port_offset,
        db_port=d.db_port + port_offset,
        node_base_port=d.node_base_port + port_offset,
    )


#: the TaskProlog every compute node runs (hivebatch/data/task_prolog.sh says why), next to slurm.conf
TASK_PROLOG = "hivebatch-task-prolog.sh"


def task_prolog_path(conf_dir: Path | None) -> Path:
    """Where slurm.conf's TaskProlog points: ``conf_dir`` (where the files are written) or $SLURM_CONF's directory."""
    return slurm_conf_dir(conf_dir) / TASK_PROLOG


def config_files(data: Mapping[str, Any], opts: ConfigOptions) -> dict[str, tuple[str, int]]:
    """Every generated file by name, with its text and file mode (slurmdbd.conf only for a lab)."""
    layout = cluster_layout(data)
    hw = opts.hardware
    lab = lab_options(opts.lab_dir, opts.cluster_name, opts.lab_port_offset) if opts.lab_dir else None
    devices = opts.device_dir or (f"{lab.state_dir}/dev" if lab else "/dev")
    plan = AccountingPlan(
        cluster=opts.cluster_name,
        vcs=layout.vcs,
        users=parse_user_specs(opts.users, layout.vcs),
        operators=list(opts.operators),
        opportunistic_grace_s=parse_notice(data).slurm_grace_s,
    )
    files: dict[str, tuple[str, int]] = {
        "slurm.conf": (
            slurm_conf(
                layout, hw, task_prolog_path(opts.conf_dir), shards=opts.shards, lab=lab, tuned=opts.tuned
            ),
            0o644,
        ),
        "gres.conf": (gres_conf(layout, hw, shards=opts.shards, device_dir=devices), 0o644),
        "accounts.sh": (accounting_script(plan), 0o755),
        "job_submit.lua": (job_submit_lua(data, opts.operators, opts.conf_dir), 0o644),
        "cli_filter.lua": (cli_filter_lua(data, opts.operators), 0o644),
        TASK_PROLOG: (
            resources.files("hivebatch").joinpath("data/task_prolog.sh").read_text(encoding="utf-8"),
            0o755,
        ),
    }
    if lab:
        files["slurmdbd.conf"] = (slurmdbd_conf(lab), 0o600)
    return files


def write_files(out: Path, files: Mapping[str, tuple[str, int]]) -> list[str]:
    """Write every file next to its target first, then rename, so a failure leaves the old set intact.

    Files whose text is unchanged are left alone; returns the names actually replaced.
    """
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


def merge_diff(site: Path, generated: str) -> tuple[str, list[str]]:
    """The unified diff merging ``generated`` into the site's slurm.conf makes, and merge_into's warnings."""
    current = site.read_text(encoding="utf-8", errors="replace")
    merged, warnings = merge_into(current, generated)
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        merged.splitlines(keepends=True),
        str(site),
        f"{site} (with hivebatch)",
    )
    return "".join(diff), warnings
