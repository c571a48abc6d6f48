"""Slurm configuration generated from hivebatch's own cluster description.

The cell config is the single source of truth for nodes and GPUs; the Slurm side must match it exactly,
so ``hadmin slurm-config`` writes it from the same parsed spec the cell core uses:

* ``slurm.conf`` node lines with **one GRES Type per GPU index** (``gpu:g0:1 … gpu:g7:1``): a job asking
  ``--gres=gpu:g3:1,gpu:g5:1`` then gets exactly GPUs 3 and 5, which is how the controller pins placements.
* shards (``shard:gN:<GiB of GPU memory>``) typed the same way, so a shared job can be pinned to one GPU.
* ``gres.conf`` with one line per GPU index and ``Cores=`` of the GPU's socket.
* the ``sacctmgr`` commands: cluster, one account per virtual cluster, the QOS classes (opportunistic
  preemptable by requeue) and users with their accounts, including the controller's Operator user.

For the local lab (``scripts/slurm-lab``) a complete ``slurm.conf`` and ``slurmdbd.conf`` are written;
for a real cluster the node, partition and GRES lines plus the settings hivebatch relies on.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hivebatch.errors import ConfigError

#: QOS classes, highest first, and the Slurm priority each one gets.
QOS_PRIORITIES: dict[str, int] = {"urgent": 1000, "prior": 500, "normal": 100, "opportunistic": 0}
PREEMPTABLE_QOS = "opportunistic"
DEFAULT_QOS = "normal"
#: Account of users that administer but do not belong to a virtual cluster (the controller's Operator).
ADMIN_ACCOUNT = "hivebatch"
#: One shard = this many MiB of the GPU's memory, so a 32G V100 offers 32 shards.
SHARD_MIB = 1024


@dataclass(frozen=True)
class NodeLayout:
    """What Slurm must know of one node: its GPUs (by index), their socket and memory."""

    name: str
    gpu_type: str
    gpu_indices: list[int]
    socket_of: dict[int, int]
    gpu_memory_mib: int | None = None

    @property
    def sockets(self) -> int:
        return max(1, len(set(self.socket_of.values())))

    def shards_per_gpu(self) -> int:
        return (self.gpu_memory_mib or 0) // SHARD_MIB


@dataclass(frozen=True)
class ClusterLayout:
    nodes: list[NodeLayout]
    vcs: list[str]


@dataclass(frozen=True)
class NodeHardware:
    """Per-node CPU and memory figures written into NodeName lines (a lab fakes them)."""

    cores_per_socket: int = 8
    real_memory_mb: int = 64000


@dataclass(frozen=True)
class LabOptions:
    """Where and on which ports the local lab runs; absent for a real cluster."""

    state_dir: Path
    cluster_name: str = "hivebatch"
    ctld_port: int = 16817
    dbd_port: int = 16819
    db_port: int = 13307
    node_base_port: int = 17001
    db_password: str = "hivebatch-lab"
    accounting: bool = True


@dataclass(frozen=True)
class AccountingPlan:
    cluster: str
    vcs: list[str]
    users: dict[str, list[str]] = field(default_factory=dict)
    operators: list[str] = field(default_factory=list)
    #: the notice an opportunistic job gets when Slurm requeues it for a guaranteed job's CPUs or memory
    #: (its QOS's GraceTime): the config's notice for that class (``preemption:``)
    opportunistic_grace_s: int = 0


# --- reading the cluster ---------------------------------------------------------------------------


def cluster_layout(data: Mapping[str, Any]) -> ClusterLayout:
    """Nodes and VCs from a whole config mapping, through the cell core's own parser (ConfigError if bad)."""
    from hivebatch.cells import parse_cluster_config

    spec = parse_cluster_config(data)
    nodes = [
        NodeLayout(
            name=n.name,
            gpu_type=n.gpu_type,
            gpu_indices=sorted(n.gpu_indices),
            socket_of=dict(n.socket_of),
            gpu_memory_mib=spec.gpu_memory_mib(n.gpu_type),
        )
        for n in spec.nodes
    ]
    return ClusterLayout(nodes=nodes, vcs=list(spec.vcs))


# --- rendering -------------------------------------------------------------------------------------


def _ranges(values: Iterable[int]) -> str:
    """[0,1,2,3,8] → '0-3,8' (Slurm's core list syntax)."""
    vals = sorted(set(values))
    parts: list[str] = []
    start = prev = None
    for v in vals:
        if start is None:
            start = prev = v
        elif prev is not None and v == prev + 1:
            prev = v
        else:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = v
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(parts)


def gres_string(node: NodeLayout, shards: bool) -> str:
    items = [f"gpu:g{i}:1" for i in node.gpu_indices]
    if shards and node.shards_per_gpu():
        items += [f"shard:g{i}:{node.shards_per_gpu()}" for i in node.gpu_indices]
    return ",".join(items)


def uses_shards(layout: ClusterLayout, shards: bool) -> bool:
    return shards and any(n.shards_per_gpu() for n in layout.nodes)


def node_lines(
    layout: ClusterLayout, hw: NodeHardware, shards: bool, lab: LabOptions | None, tuned: bool = False
) -> list[str]:
    lines = []
    for i, node in enumerate(layout.nodes):
        where = f" NodeHostname=localhost NodeAddr=127.0.0.1 Port={lab.node_base_port + i}" if lab else ""
        lines.append(
            f"NodeName={node.name}{where} Sockets={node.sockets} CoresPerSocket={hw.cores_per_socket} "
            f"ThreadsPerCore=1 RealMemory={hw.real_memory_mb} Gres={gres_string(node, shards)} "
            # the per-index GRES types hide the GPU model; the feature names it (sinfo -o %f, --constraint)
            f"Features={node.gpu_type.lower()} State=UNKNOWN"
        )
    names = ",".join(n.name for n in layout.nodes)
    # only the lab makes it the default partition: a site keeps its own default
    default = " Default=YES" if lab is not None or tuned else ""
    lines.append(f"PartitionName=gpu Nodes={names}{default} MaxTime=INFINITE State=UP")
    return lines


def gres_conf(layout: ClusterLayout, hw: NodeHardware, shards: bool, device_dir: str = "/dev") -> str:
    """One line per GPU index: its own Type, its device file and the cores of its socket."""
    out = [
        "# generated by hadmin slurm-config: one GRES Type per GPU index pins exact GPUs",
        "AutoDetect=off",
    ]
    for node in layout.nodes:
        for i in node.gpu_indices:
            s = node.socket_of.get(i, 0)
            cores = _ranges(range(s * hw.cores_per_socket, (s + 1) * hw.cores_per_socket))
            dev = f"{device_dir.rstrip('/')}/nvidia{i}"
            out.append(f"NodeName={node.name} Name=gpu Type=g{i} File={dev} Cores={cores}")
            if shards and node.shards_per_gpu():
                out.append(
                    f"NodeName={node.name} Name=shard Type=g{i} Count={node.shards_per_gpu()} File={dev} Cores={cores}"
                )
    return "\n".join(out) + "\n"


def _settings(
    layout: ClusterLayout, shards: bool, accounting: bool, tuned: bool, task_prolog: Path
) -> list[str]:
    """Settings hivebatch relies on, common to the lab and a real cluster; ``tuned``: the lab's
    quick turnarounds (a site keeps its own scheduler timing)."""
    lines = [
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        # every GPU ask goes through hivebatch's job_submit.lua (written next to slurm.conf)
        "JobSubmitPlugins=lua",
        # srun's own GPU options in forms its steps can start with on per-GPU pins (cli_filter.lua,
        # next to slurm.conf on every host users run srun on)
        "CliFilterPlugins=cli_filter/lua",
        f"GresTypes={'gpu,shard' if uses_shards(layout, shards) else 'gpu'}",
        # an srun inside a --mem-per-gpu job needs it (the script says why); on every compute node
        f"TaskProlog={task_prolog}",
    ]
    if tuned:
        lines += [
            # released and requeued jobs should start within seconds, not at the next minute
            "SchedulerParameters=sched_interval=2,bf_interval=2",
            # a requeued job may start again after 10 s instead of 120 s
            "AuthInfo=cred_expire=10",
        ]
    if accounting:
        # typed entries let sacct tell which GPU indices a finished job held (AllocTRES gres/gpu:g3=1)
        indices = sorted({i for n in layout.nodes for i in n.gpu_indices})
        tres = ",".join(["gres/gpu", *(f"gres/gpu:g{i}" for i in indices)])
        if uses_shards(layout, shards):
            tres += ",gres/shard"
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageTRES={tres}",
            "AccountingStorageEnforce=associations,limits,qos",
            # the hivebatch request travels in the job comment; keep it in sacct too
            "AccountingStoreFlags=job_comment",
            "PriorityType=priority/multifactor",
            "PriorityWeightQOS=10000",
            "PreemptType=preempt/qos",
            "PreemptMode=REQUEUE",
            # a preempted job's own --signal at the start of its QOS's GraceTime, not SIGTERM to its steps
            # only (a batch shell without steps would hear nothing until it is killed: preempt_grace.txt)
            "SlurmctldParameters=preempt_send_user_signal",
        ]
    return lines


def slurm_conf(
    layout: ClusterLayout,
    hw: NodeHardware,
    task_prolog: Path,
    shards: bool = True,
    lab: LabOptions | None = None,
    tuned: bool = False,
) -> str:
    """A complete slurm.conf for the lab, or the lines to merge into a real cluster's slurm.conf
    (with the lab's timing and default partition only when ``tuned``)."""
    if lab is None:
        head = [
            "# generated by hadmin slurm-config: merge these lines into your slurm.conf",
            "# (set DefMemPerCPU too: a job without --mem otherwise takes a whole node's memory)",
            *_settings(layout, shards, accounting=True, tuned=tuned, task_prolog=task_prolog),
        ]
        return "\n".join(head + node_lines(layout, hw, shards, None, tuned)) + "\n"
    d = lab.state_dir
    lines = [
        "# generated by hadmin slurm-config for the local lab (scripts/slurm-lab); do not edit",
        f"ClusterName={lab.cluster_name}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={lab.ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log",
        f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        # lets each slurmd claim the fake sockets/cores/memory of its NodeName line
        "SlurmdParameters=config_overrides",
        # an admin's State=DOWN stays until State=RESUME, as at most sites; a slurmd that stopped
        # answering (the lab restarts them) still comes back when it registers again
        "ReturnToService=1",
        "MailProg=/bin/true",
        "KillWait=5",
        "MinJobAge=300",
        # without a default, a job without --mem takes the whole node's memory and blocks its GPUs
        "DefMemPerCPU=2000",
        # a counted license, as sites count their MATLAB seats: jobs ask for it with -L matlab:N
        "Licenses=matlab:2",
        "InactiveLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        *_settings(layout, shards, accounting=lab.accounting, tuned=True, task_prolog=task_prolog),
    ]
    if lab.accounting:
        lines += ["AccountingStorageHost=localhost", f"AccountingStoragePort={lab.dbd_port}"]
    return "\n".join(lines + node_lines(layout, hw, shards, lab)) + "\n"


def slurmdbd_conf(lab: LabOptions) -> str:
    d = lab.state_dir
    return (
        "\n".join(
            [
                "# generated by hadmin slurm-config for the local lab; slurmdbd wants mode 600",
                "AuthType=auth/munge",
                "DbdHost=localhost",
                f"DbdPort={lab.dbd_port}",
                "SlurmUser=root",
                f"PidFile={d}/run/slurmdbd.pid",
                f"LogFile={d}/log/slurmdbd.log",
                "DebugLevel=info",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={lab.db_port}",
                "StorageUser=slurm",
                f"StoragePass={lab.db_password}",
                "StorageLoc=slurm_acct_db",
            ]
        )
        + "\n"
    )


def accounting_commands(plan: AccountingPlan) -> list[list[str]]:
    """``sacctmgr`` argument lists, in order; re-running them changes nothing ('Nothing new added')."""
    sa = ["sacctmgr", "-i"]
    qos_list = ",".join(QOS_PRIORITIES)
    cmds: list[list[str]] = [[*sa, "add", "cluster", plan.cluster]]
    cmds.append([*sa, "add", "qos", *[q for q in QOS_PRIORITIES if q != DEFAULT_QOS]])
    for qos, prio in QOS_PRIORITIES.items():
        # the preemptable QOS is requeued when preempted; every other QOS may preempt it
        preempt = (
            ["PreemptMode=requeue", f"GraceTime={plan.opportunistic_grace_s}"]
            if qos == PREEMPTABLE_QOS
            else [f"Preempt={PREEMPTABLE_QOS}"]
        )
        cmds.append([*sa, "modify", "qos", "where", f"name={qos}", "set", f"Priority={prio}", *preempt])
    accounts = list(plan.vcs) + ([ADMIN_ACCOUNT] if plan.operators else [])
    for acct in accounts:
        what = "hivebatch administration" if acct == ADMIN_ACCOUNT else f"virtual cluster {acct}"
        cmds.append(
            [
                *sa,
                "add",
                "account",
                acct,
                f"Cluster={plan.cluster}",
                f"Description={what}",
                "Organization=hivebatch",
                f"QOS={qos_list}",
                f"DefaultQOS={DEFAULT_QOS}",
            ]
        )
    for user, accts in plan.users.items():
        for acct in accts:
            cmds.append(
                [
                    *sa,
                    "add",
                    "user",
                    user,
                    f"Account={acct}",
                    f"Cluster={plan.cluster}",
                    f"QOS={qos_list}",
                    f"DefaultQOS={DEFAULT_QOS}",
                ]
            )
    for op in plan.operators:
        cmds.append(
            [
                *sa,
                "add",
                "user",
                op,
                f"Account={ADMIN_ACCOUNT}",
                f"Cluster={plan.cluster}",
                "AdminLevel=Operator",
            ]
        )
        cmds.append([*sa, "modify", "user", "where", f"name={op}", "set", "AdminLevel=Operator"])
    return cmds


def accounting_script(plan: AccountingPlan) -> str:
    lines = [
        "#!/bin/sh",
        "# generated by hadmin slurm-config: accounts = virtual clusters, QOS = hivebatch classes.",
        "# 'Nothing new added' on a re-run is expected, so errors of single commands are tolerated.",
    ]
    lines += [shlex.join(c) + " || true" for c in accounting_commands(plan)]
    return "\n".join(lines) + "\n"


def parse_user_specs(specs: Iterable[str], known_accounts: Iterable[str]) -> dict[str, list[str]]:
    """``alice=cv`` or ``alice=cv,nlp`` → {"alice": ["cv"]}; accounts must be VCs of the config."""
    known = set(known_accounts)
    users: dict[str, list[str]] = {}
    for spec in specs:
        user, sep, accts = spec.partition("=")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user) or not accts:
            raise ConfigError(f"--user {spec!r}: write USER=ACCOUNT[,ACCOUNT] with a Unix user name")
        for a in accts.split(","):
            if a not in known:
                raise ConfigError(
                    f"--user {spec!r}: account {a!r} is not a virtual cluster of the config ({', '.join(sorted(known))})"
                )
            users.setdefault(user, []).append(a)
    return users


# --- merging the generated lines into a site's slurm.conf (hadmin slurm-config --diff) ---

_TYPED_GPU = re.compile(r"(?:^|,)gpu:([A-Za-z][\w.-]*):", re.IGNORECASE)


def _setting(line: str) -> tuple[str, str] | None:
    """``Key=Value`` of a plain setting line (not NodeName/PartitionName/comments), key lower-cased."""
    text = line.split("#", 1)[0].strip()
    if not text or "=" not in text or text.split("=", 1)[0].lower() in ("nodename", "partitionname"):
        return None
    key, _, value = text.partition("=")
    return key.strip().lower(), value.strip()


def _node_names(line: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet

    first = line.split()[0]
    return list(NodeSet(first.split("=", 1)[1])) if first.lower().startswith("nodename=") else []


def _keeps_users_apart(line: str, setting: tuple[str, str] | None, gpu_nodes: set[str]) -> str | None:
    """A warning for a setting that keeps users' jobs off each other's nodes, which the cells do not
    model: a job of one VC would keep other VCs off GPUs the cells gave them (or wait pinned beside
    them, as --exclusive=user did on the lab: tests/fixtures/slurm/exclusive_user.txt)."""
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    if setting and setting[0] == "mcsplugin" and setting[1].lower() not in ("", "mcs/none"):
        return (
            f"MCSPlugin={setting[1]}: --exclusive=mcs jobs keep other groups off their GPU nodes, which the"
            " cells do not model; use mcs/none on a cluster hivebatch runs"
        )
    keys = {k.lower(): v for k, _, v in (w.partition("=") for w in line.split("#", 1)[0].split() if "=" in w)}
    if "partitionname" not in keys or keys.get("exclusiveuser", "").lower() != "yes":
        return None
    listed = keys.get("nodes", "")
    try:
        reach = gpu_nodes if listed.upper() == "ALL" else gpu_nodes & set(NodeSet(listed))
    except NodeSetParseError:
        return None
    if not reach:
        return None
    return (
        f"PartitionName={keys['partitionname']}: ExclusiveUser=YES keeps other users off its GPU nodes: hivebatch"
        " pins no job where Slurm would not start it and tells opportunistic jobs there to leave for a guaranteed job,"
        " but a guaranteed job there leaves the node's other GPUs to its user alone, and other VCs' guaranteed jobs"
        " wait for them: drop it for partitions with GPU nodes"
    )


def _with_gres(site_line: str, gres: str) -> str:
    words = [w for w in site_line.split() if not w.lower().startswith("gres=")]
    return " ".join([*words, f"Gres={gres}"])


def merge_into(site: str, generated: str) -> tuple[str, list[str]]:
    """The site's slurm.conf with hivebatch's settings, GPU GRES and partition merged in, and the
    warnings an administrator must read first (GPUs that get re-typed, users kept apart on GPU nodes)."""
    ours = [ln for ln in generated.splitlines() if ln and not ln.startswith("#")]
    settings = {s[0]: (ln, s[1]) for ln in ours if (s := _setting(ln))}
    nodes = {_node_names(ln)[0]: ln for ln in ours if ln.startswith("NodeName=")}
    partition = next((ln for ln in ours if ln.startswith("PartitionName=")), None)
    warnings: list[str] = []
    out: list[str] = []
    seen_settings: set[str] = set()
    seen_nodes: set[str] = set()
    gpu_nodes = set(nodes)
    for line in site.splitlines():
        setting = _setting(line)
        names = _node_names(line) if line.strip().lower().startswith("nodename=") else []
        if (
            setting
            and setting[0] == "taskprolog"
            and setting[0] in settings
            and setting[1] != settings[setting[0]][1]
        ):
            # the site's own TaskProlog stays: one slurm.conf runs one, so ours must join it
            seen_settings.add(setting[0])
            warnings.append(
                f"TaskProlog: yours ({setting[1]}) stays; add the lines of {settings[setting[0]][1]} to it "
                "(an srun inside a --mem-per-gpu job needs them)"
            )
            out.append(line)
        elif setting and setting[0] == "clifilterplugins" and setting[0] in settings:
            # cli_filter plugins stack: the site's stay, hivebatch's joins them
            seen_settings.add(setting[0])
            plugins = [p.strip() for p in setting[1].split(",") if p.strip()]
            if "cli_filter/lua" in plugins:
                warnings.append(
                    "CliFilterPlugins: you run a cli_filter.lua already; one runs per host, so add "
                    "hivebatch's rules (the cli_filter.lua written here) to yours"
                )
                out.append(line)
            else:
                out.append(f"CliFilterPlugins={','.join([*plugins, 'cli_filter/lua'])}")
        elif setting and setting[0] == "slurmctldparameters" and setting[0] in settings:
            # a list of flags: the site's stay, hivebatch's join them
            seen_settings.add(setting[0])
            flags = [f.strip() for f in setting[1].split(",") if f.strip()]
            missing = [f for f in settings[setting[0]][1].split(",") if f not in flags]
            out.append(f"SlurmctldParameters={','.join([*flags, *missing])}" if missing else line)
        elif setting and setting[0] in settings:
            seen_settings.add(setting[0])
            out.append(settings[setting[0]][0] if setting[1] != settings[setting[0]][1] else line)
        elif names and set(names) & set(nodes):
            gres = {re.search(r"Gres=(\S+)", nodes[n]).group(1) for n in names if n in nodes}  # type: ignore[union-attr]
            if len(gres) != 1 or not set(names) <= set(nodes):
                warnings.append(
                    f"{line.split()[0]}: its nodes differ in hivebatch's config; merge its Gres by hand"
                )
                out.append(line)
                continue
            seen_nodes.update(names)
            typed = _TYPED_GPU.findall(re.search(r"Gres=(\S+)", line).group(1) if "Gres=" in line else "")  # type: ignore[union-attr]
            if typed:
                warnings.append(
                    f"{line.split()[0]}: its GPUs typed {', '.join(sorted(set(typed)))} become one type per index "
                    f"(g0, g1, …): jobs asking --gres=gpu:{typed[0]}:N or --gpus={typed[0]}:N stop matching"
                )
            out.append(_with_gres(line, gres.pop()))
        else:
            apart = _keeps_users_apart(line, setting, gpu_nodes)
            if apart:
                warnings.append(apart)
            out.append(line)
    added = [settings[k][0] for k in settings if k not in seen_settings]
    added += [ln for n, ln in nodes.items() if n not in seen_nodes]
    if partition and not re.search(r"^\s*PartitionName=gpu\b", site, re.MULTILINE | re.IGNORECASE):
        added.append(partition)
    if added:
        out += ["", "# added by hadmin slurm-config for hivebatch", *added]
    return "\n".join(out) + "\n", warnings
