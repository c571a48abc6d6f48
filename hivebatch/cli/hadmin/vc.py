"""``hadmin vc check``: config feasibility and drift between the config and live Slurm, with fixes."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hivebatch.cli.common import config_option

if TYPE_CHECKING:
    from hivebatch.reports.drift import Finding
    from hivebatch.reports.rows import VCInfo


@click.group()
def vc() -> None:
    """Virtual clusters: check the VC config against the cluster and Slurm."""


@vc.command()
@config_option
@click.option("--no-slurm", is_flag=True, help="check the config only; do not ask Slurm")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="output format")  # fmt: skip
def check(config: str | None, no_slurm: bool, fmt: str) -> None:
    """Check the VCs: the config is feasible, and Slurm has the same nodes, GPUs, accounts and QOS.

    Every problem is printed with the command or edit that fixes it. Exit status 1 when an error
    was found, so the check can gate a deployment.
    """
    from hivebatch.config import load_config
    from hivebatch.errors import HivebatchError
    from hivebatch.notice import parse_notice
    from hivebatch.reports.drift import ERROR, config_findings, drift_findings, grace_finding, qos_classes
    from hivebatch.reports.load import short_error
    from hivebatch.reports.rows import OPPORTUNISTIC
    from hivebatch.reports.topology import node_layouts, vc_infos

    path, data = load_config(config)
    vcs = vc_infos(data)
    findings = config_findings(data, vcs, [])
    if findings and findings[0].severity == ERROR:
        layouts = []
    else:
        layouts = node_layouts(data)
        findings = config_findings(data, vcs, layouts) + [_controller_finding(path)]
        if not no_slurm:
            nodes = accounts = qos = None
            why_nodes = why_acct = None
            try:
                from hivebatch.slurm import get_backend

                backend = get_backend()
                try:
                    nodes = list(backend.list_nodes())
                except HivebatchError as exc:
                    why_nodes = short_error(exc)
                list_accounts = getattr(backend, "list_accounts", None)
                list_qos = getattr(backend, "list_qos", None)
                if list_accounts is None or list_qos is None:
                    why_acct = "this Slurm backend cannot list accounts and QOS"
                else:
                    try:
                        accounts, qos = list(list_accounts()), list(list_qos())
                    except HivebatchError as exc:
                        why_acct = short_error(exc)
            except (ImportError, HivebatchError) as exc:
                why_nodes = why_acct = f"no Slurm backend ({exc})"
            findings += drift_findings(
                layouts, vcs, qos_classes(data), nodes, accounts, qos, why_nodes, why_acct
            )
            findings.append(_plugin_finding(data))
            if accounts is not None:  # accounting answers: its limits can be read too
                findings += _gpu_limit_findings(backend, vcs)
            if qos is not None and OPPORTUNISTIC in qos:
                grace = grace_finding(parse_notice(data).slurm_grace_s, _grace_of(backend, OPPORTUNISTIC))
                findings += [grace] if grace is not None else []
    errors = sum(1 for f in findings if f.severity == ERROR)
    if fmt == "json":
        click.echo(
            json.dumps(
                {"config": str(path), "errors": errors, "findings": [asdict(f) for f in findings]}, indent=2
            )
        )
    else:
        marks = {"ok": "ok   ", "warning": "WARN ", "error": "ERROR"}
        for f in findings:
            click.echo(f"{marks.get(f.severity, f.severity)}  {f.what}")
            if f.fix:
                click.echo(f"       fix: {f.fix}")
        click.echo(
            f"{errors} error(s), {sum(1 for f in findings if f.severity == 'warning')} warning(s) in {path}"
        )
    if errors:
        raise click.exceptions.Exit(1)


def _controller_finding(path: Path) -> Finding:
    """Whether the controller starts on the config: every section besides the cells (limits:,
    qos:, sharing:, preemption:, user_limits:, controller:) is read as the controller reads it."""
    from hivebatch.controller.context import load_context
    from hivebatch.errors import HivebatchError
    from hivebatch.reports.drift import ERROR, Finding

    try:
        load_context(path)
    except HivebatchError as exc:
        return Finding(ERROR, f"the controller cannot start on this config: {exc}", f"edit {path}")
    return Finding("ok", "the controller reads every section of the config")


def _plugin_finding(data: dict[str, Any]) -> Finding:
    """The installed job_submit.lua (beside slurm.conf) against the config, and the copy of the config's
    part the controller writes for it each cycle."""
    from hivebatch.jobsubmit import (
        FOLLOWED,
        followed_table,
        lua_literal,
        nodes_file,
        slurm_conf_path,
        usage_max_age_s,
    )
    from hivebatch.reports.drift import ControllerCopy, plugin_finding

    # slurmctld loads the plugin from beside the slurm.conf it reads, also where /etc/slurm links to it
    where = slurm_conf_path().resolve().parent
    followed = followed_table(data)
    items = {f"[{lua_literal(k)}] = {lua_literal(v)}": FOLLOWED[k] for k, v in followed.items()}
    path = nodes_file(data, where)
    copy = ControllerCopy(
        str(path), _read(path), f'["site"] = {lua_literal(followed)}', usage_max_age_s(data)
    )
    return plugin_finding(_read(where / "job_submit.lua"), str(where), items, copy)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _gpu_limit_findings(backend: object, vcs: list[VCInfo]) -> list[Finding]:
    from hivebatch.errors import HivebatchError
    from hivebatch.reports.drift import WARNING, Finding, gpu_limit_findings

    try:
        limits = backend.gpu_group_limits()  # type: ignore[attr-defined]
    except (AttributeError, HivebatchError) as exc:
        return [Finding(WARNING, f"Slurm's GPU limits (GrpTRES) not checked: {exc}",
                        "check by hand: sacctmgr show assoc format=Account,User,GrpTRES")]  # fmt: skip
    return gpu_limit_findings(vcs, limits) if limits is not None else []


def _grace_of(backend: object, qos: str) -> int | None:
    """The QOS's GraceTime as Slurm has it; None when it cannot be read."""
    from hivebatch.errors import HivebatchError

    try:
        return backend.qos_grace_s(qos)  # type: ignore[attr-defined,no-any-return]
    except (AttributeError, HivebatchError):
        return None
