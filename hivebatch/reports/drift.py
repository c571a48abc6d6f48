"""``hadmin vc check``: is the VC config feasible, and does live Slurm match it? Each finding says the fix."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hivebatch.errors import ConfigError
from hivebatch.reports.gpumap import NodeLayout
from hivebatch.reports.rows import OPPORTUNISTIC, VCInfo
from hivebatch.slurm.types import GpuLimit

ERROR = "error"
WARNING = "warning"
OK = "ok"


class LiveNode(Protocol):
    """What the check reads of a node as Slurm reports it (hivebatch.slurm.types.SlurmNode)."""

    @property
    def state(self) -> str: ...
    @property
    def bad(self) -> bool: ...
    @property
    def gpu_indices(self) -> list[int]: ...


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning | ok
    what: str
    fix: str = ""


def _ranges(values: Iterable[int]) -> str:
    ordered = sorted(set(values))
    if not ordered:
        return "none"
    parts: list[str] = []
    start = prev = ordered[0]
    for v in ordered[1:] + [None]:  # type: ignore[list-item]
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def config_findings(data: Mapping[str, Any], vcs: list[VCInfo], layouts: list[NodeLayout]) -> list[Finding]:
    """Feasibility through the cell core (the same check the controller makes at start-up)."""
    out: list[Finding] = []
    try:
        from hivebatch.cells import parse_cluster_config
    except ImportError:
        parse_cluster_config = None  # type: ignore[assignment]
    if parse_cluster_config is not None:
        try:
            parse_cluster_config(dict(data))
        except ConfigError as exc:
            return [
                Finding(
                    ERROR, f"config: {exc}", "edit cluster:/virtual_clusters: in the config until this passes"
                )
            ]
    total = sum(len(n.gpu_indices) for n in layouts)
    reserved = sum(v.gpus for v in vcs)
    out.append(
        Finding(
            OK,
            f"config feasible: {len(vcs)} VCs reserve {reserved} of {total} GPUs on {len(layouts)} nodes"
            + (f"; {total - reserved} GPUs only ever run opportunistic work" if total > reserved else ""),
        )
    )
    for v in vcs:
        if v.gpus == 0:
            out.append(Finding(WARNING, f"VC {v.name} has no cells: its jobs can only run opportunistically",
                               f"give virtual_clusters.{v.name}.cells at least one cell"))  # fmt: skip
        else:
            out.append(Finding(OK, f"VC {v.name}: {v.cells_text()} = {v.gpus} GPUs"))
    return out


def _node_findings(name: str, layout: NodeLayout, node: LiveNode) -> list[Finding]:
    """One configured node against Slurm's view of it: its GPU indices, then its health."""
    out: list[Finding] = []
    want, have = set(layout.gpu_indices), set(node.gpu_indices)
    if want != have:
        out.append(Finding(
            ERROR,
            f"node {name}: the config has GPUs {_ranges(want)} but Slurm has {_ranges(have)}",
            f"give {name} one gres Type per GPU index (gpu:g0 … gpu:g{max(want, default=0)}) in slurm.conf and "
            f"gres.conf (`hadmin slurm-config` writes both), or fix its cell type in the config",
        ))  # fmt: skip
    if node.bad:
        reason = f" ({node.reason})" if getattr(node, "reason", "") else ""
        out.append(Finding(
            WARNING,
            f"node {name} is {node.state}{reason}: no new work goes there and VCs bound to it lose capacity",
            f"once repaired: scontrol update NodeName={name} State=RESUME",
        ))  # fmt: skip
    return out


def _slurm_node_findings(layouts: list[NodeLayout], live_nodes: list[Any]) -> list[Finding]:
    """The config's nodes against Slurm's: missing either side, wrong GPU indices, unhealthy."""
    out: list[Finding] = []
    live = {n.name: n for n in live_nodes}
    configured = {n.name: n for n in layouts}
    for name, layout in configured.items():
        node = live.get(name)
        if node is None:
            out.append(Finding(
                ERROR,
                f"node {name} is in the config but not in Slurm: its cells can never be used",
                f"add node {name} to slurm.conf with its GPU gres (`hadmin slurm-config` prints the lines) "
                f"and restart slurmctld, or remove it from cluster.physical_cells",
            ))  # fmt: skip
            continue
        out.extend(_node_findings(name, layout, node))
    for name, node in live.items():
        if name not in configured:
            out.append(Finding(
                WARNING,
                f"node {name} ({len(node.gpu_indices)} GPUs) is in Slurm but not in the config: hivebatch never places work there",
                "add it to cluster.physical_cells (and to a VC's cells), or leave it out on purpose",
            ))  # fmt: skip
    if live and not any(f.severity == ERROR for f in out):
        out.append(
            Finding(
                OK,
                f"Slurm has every configured node with the configured GPU indices ({len(configured)} nodes)",
            )
        )
    return out


def _accounting_findings(
    vcs: list[VCInfo], classes: list[str], accounts: list[str], qos: list[str]
) -> list[Finding]:
    """Every VC must be a Slurm account and every class (plus the opportunistic one) a Slurm QOS."""
    have_accounts = {a.lower() for a in accounts}
    out = _missing_findings(
        [v.name for v in vcs if v.name.lower() not in have_accounts],
        lambda name: Finding(
            ERROR,
            f"VC {name} has no Slurm account: its users cannot submit (hsub uses the VC as the account)",
            f"sacctmgr -i add account {name} && sacctmgr -i add user USER account={name}",
        ),
        f"every VC is a Slurm account ({', '.join(v.name for v in vcs)})",
    )
    have_qos = {q.lower() for q in qos}
    wanted = list(dict.fromkeys([*classes, OPPORTUNISTIC]))
    out += _missing_findings(
        [c for c in wanted if c.lower() not in have_qos],
        lambda name: Finding(
            ERROR,
            f"QOS {name} is missing in Slurm: jobs of class {name} are refused",
            f"sacctmgr -i add qos {name}"
            + (" Preempt=… (see `hadmin slurm-config`)" if name != OPPORTUNISTIC else "")
            + f", then grant it: sacctmgr -i modify account VC set qos+={name}",
        ),
        f"every class is a Slurm QOS ({', '.join(wanted)})",
    )
    return out


def gpu_limit_findings(vcs: list[VCInfo], limits: Sequence[GpuLimit]) -> list[Finding]:
    """Slurm GPU totals (GrpTRES) on a VC's account or its users below the VC's cells: Slurm keeps
    those jobs from starting where the cells have room (AssocGrpGRES), which breaks the guarantee.
    A site's old per-group quota, left in place when the cells took its job over."""
    size = {v.name: v.gpus for v in vcs}
    out: list[Finding] = []
    for lim in limits:
        gpus = size.get(lim.account)
        if gpus is None or lim.gpus >= gpus:
            continue
        if lim.user:
            out.append(Finding(
                WARNING,
                f"Slurm caps {lim.user}'s GPUs in account {lim.account} at {lim.gpus} (GrpTRES), below VC "
                f"{lim.account}'s {gpus}: Slurm holds their jobs back (AssocGrpGRES) where the cells have room",
                f"sacctmgr -i modify user {lim.user} where account={lim.account} set GrpTRES=gres/gpu=-1 "
                "(limits per user belong in hivebatch's user_limits:)",
            ))  # fmt: skip
        else:
            out.append(Finding(
                WARNING,
                f"Slurm caps account {lim.account}'s GPUs at {lim.gpus} (GrpTRES), below VC {lim.account}'s "
                f"{gpus}: Slurm holds its jobs back (AssocGrpGRES) where the cells have room",
                f"sacctmgr -i modify account {lim.account} set GrpTRES=gres/gpu=-1 (the cells are the VC's quota)",
            ))  # fmt: skip
    return out or [Finding(OK, "no Slurm GPU limit (GrpTRES) on a VC's account or users is below its cells")]


def grace_finding(notice_s: int, grace_s: int | None) -> Finding | None:
    """The opportunistic QOS's GraceTime against the config's notice for that class, which hadmin
    slurm-config makes it: the notice Slurm gives a job it preempts for a guaranteed job's CPUs or
    memory (None: not known)."""
    if grace_s is None:
        return None
    if grace_s == notice_s:
        return Finding(OK, f"QOS {OPPORTUNISTIC} gives the config's notice as its GraceTime ({notice_s} s)")
    return Finding(
        WARNING,
        f"QOS {OPPORTUNISTIC} has GraceTime {grace_s} s, but the config gives opportunistic jobs {notice_s} s "
        f"of notice: a job Slurm preempts for a guaranteed job's CPUs or memory gets {grace_s} s",
        f"sacctmgr -i modify qos where name={OPPORTUNISTIC} set GraceTime={notice_s}",
    )


def _missing_findings(missing: list[str], finding: Callable[[str], Finding], all_there: str) -> list[Finding]:
    """One finding per missing name, or a single OK saying `all_there` when none is missing."""
    return [finding(name) for name in missing] or [Finding(OK, all_there)]


def drift_findings(
    layouts: list[NodeLayout],
    vcs: list[VCInfo],
    classes: list[str],
    live_nodes: list[Any] | None,
    accounts: list[str] | None,
    qos: list[str] | None,
    why_no_slurm: str | None = None,
    why_no_accounting: str | None = None,
) -> list[Finding]:
    """Compare the config with Slurm: nodes, GPU indices, node health, accounts (VCs) and QOS (classes)."""
    out: list[Finding] = []
    if live_nodes is None:
        out.append(Finding(WARNING, f"Slurm nodes not checked: {why_no_slurm or 'Slurm not reachable'}",
                           "run on a host where `sinfo` works (SLURM_CONF set), then check again"))  # fmt: skip
    else:
        out.extend(_slurm_node_findings(layouts, live_nodes))
    if accounts is None or qos is None:
        out.append(Finding(
            WARNING,
            f"accounts and QOS not checked: {why_no_accounting or 'this Slurm backend cannot list them'}",
            "check by hand: sacctmgr show account; sacctmgr show qos",
        ))  # fmt: skip
        return out
    out.extend(_accounting_findings(vcs, classes, accounts, qos))
    return out


@dataclass(frozen=True)
class ControllerCopy:
    """The controller's node sizes file (``path``, its ``text`` or None), in which the plugin finds the
    config's part of its site table, which it prefers to its own while the file is at most
    ``max_age_s`` old; ``site`` is that part as the controller writes it for this config."""

    path: str
    text: str | None
    site: str
    max_age_s: int

    def age_s(self, now: float) -> float | None:
        found = re.search(r'\["written_at"\] = (\d+)', self.text or "")
        return now - int(found.group(1)) if found else None


def _holds(text: str, item: str) -> bool:
    """``item`` (``["key"] = value``) is an item of a table in ``text``, not the start of a longer value."""
    return any(item + end in text for end in (",", " }"))


def plugin_finding(
    plugin: str | None, where: str, items: Mapping[str, str], copy: ControllerCopy, now: float | None = None
) -> Finding:
    """Whether the job_submit.lua beside slurm.conf checks jobs against this config: ``items`` are the
    items of its site table the config decides, each as the plugin would hold it (``["key"] = value``),
    keyed by what they are (``VCs``, ``GPU nodes``, …). While the controller runs, the plugin takes its
    copy of them (``copy``); else those written into it, which a change of the config reaches only in
    a newly written file."""
    if plugin is None:
        return Finding(WARNING, f"job_submit.lua not checked: there is none in {where}",
                       "run where slurmctld's slurm.conf is (SLURM_CONF set), then check again")  # fmt: skip
    differ = sorted({what for item, what in items.items() if not _holds(plugin, item)})
    if not differ:
        return Finding(OK, f"job_submit.lua was written for this config: {where}/job_submit.lua")
    stale = (
        f"{where}/job_submit.lua was written for another config (its {' and '.join(differ)} differ from "
        "this one's)"
    )
    fix = (
        f"hadmin slurm-config --out NEWDIR, then copy NEWDIR/job_submit.lua to {where} (slurmctld reloads it)"
    )
    age = copy.age_s(time.time() if now is None else now)
    if age is not None and age <= copy.max_age_s and _holds(copy.text or "", copy.site):
        return Finding(
            WARNING,
            f"{stale}: it checks jobs against the controller's copy of this config ({copy.path}, "
            f"{age:.0f} s old), and against its own once that copy is over {copy.max_age_s} s old "
            "(the controller stopped)",
            fix,
        )
    if copy.text is None:
        why = f"there is no {copy.path}"
    elif age is None:
        why = f"{copy.path} says not when it was written"
    elif age > copy.max_age_s:
        why = f"{copy.path} is {age:.0f} s old: is the controller running?"
    else:
        why = f"{copy.path} holds another config too: does the controller run on this one?"
    return Finding(
        ERROR,
        f"{stale}: it checks jobs against its own, as the controller's copy of this config cannot be used "
        f"({why})",
        fix,
    )


def qos_classes(data: Mapping[str, Any]) -> list[str]:
    section = data.get("qos") or {}
    classes = section.get("classes") if isinstance(section, Mapping) else None
    if isinstance(classes, Mapping) and classes:
        return [str(c) for c in classes]
    return ["urgent", "prior", "normal"]
