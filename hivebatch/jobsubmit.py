"""The Slurm ``job_submit.lua`` that puts every GPU job through hivebatch, rendered for one site.

The plugin logic ships as ``hivebatch/data/job_submit.lua``; what it must know of the site (GPU types and
their sizes, virtual clusters, classes, the Operators' uids) is written above it as the table
``HIVEBATCH_SITE``, generated from the same cluster config the cells use. slurmctld reloads the file when
its modification time changes, so ``hadmin slurm-config`` takes effect without a restart.
"""

from __future__ import annotations

import math
import os
import pwd
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hivebatch.bounds import parse_limits
from hivebatch.errors import ConfigError
from hivebatch.request import CLASSES
from hivebatch.slurmconf import DEFAULT_QOS, PREEMPTABLE_QOS, SHARD_MIB

if TYPE_CHECKING:
    from hivebatch.cells import ClusterSpec

#: Users every site treats as Operators besides the configured ones: root and Slurm's own user.
ALWAYS_OPERATORS = ("root",)
USAGE_FILE = "hivebatch_usage.lua"
#: the GPU nodes' largest CPU count and memory, which the controller writes beside the usage file
NODES_FILE = "hivebatch_nodes.lua"
#: where the plugin notes the owner updates it refuses (slurmctld passes no message back from an
#: update), in a directory slurmctld's user may write and the controller read
REFUSALS_FILE = "/var/spool/hivebatch/refused.log"
#: where Slurm's daemons and clients look for slurm.conf when $SLURM_CONF is not set
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
#: the usage file goes stale after this many missed controller cycles, and never sooner than 5 minutes
USAGE_STALE_CYCLES = 5
USAGE_MIN_AGE_S = 300


def _lua_char(c: str) -> str:
    if c in ('"', "\\"):
        return "\\" + c
    return f"\\{ord(c):03d}" if ord(c) < 32 or ord(c) == 127 else c


def usage_file(data: Mapping[str, Any], conf_dir: str | os.PathLike[str] | None = None) -> Path:
    """The controller's usage file for the plugin: ``controller.usage_file`` when the config names one,
    else next to slurm.conf — ``conf_dir`` (where ``hadmin slurm-config --out`` writes) or the directory
    of $SLURM_CONF, which is where job_submit/lua loads ``job_submit.lua`` from."""
    section = data.get("controller") or {}
    named = section.get("usage_file") if isinstance(section, Mapping) else None
    if named is not None:
        if not isinstance(named, str) or not os.path.isabs(named):
            raise ConfigError(
                f"controller.usage_file must be an absolute path (slurmctld reads it), got {named!r}"
            )
        return Path(named)
    return slurm_conf_dir(conf_dir) / USAGE_FILE


def refusals_file(data: Mapping[str, Any]) -> Path:
    """Where the plugin notes the owner updates it refuses, for the controller (and so hq) to say why:
    ``controller.refusals_file``, else REFUSALS_FILE. slurmctld's user writes it; nobody else may."""
    section = data.get("controller") or {}
    named = section.get("refusals_file") if isinstance(section, Mapping) else None
    if named is None:
        return Path(REFUSALS_FILE)
    if not isinstance(named, str) or not os.path.isabs(named):
        raise ConfigError(
            f"controller.refusals_file must be an absolute path (slurmctld writes it), got {named!r}"
        )
    return Path(named)


def nodes_file(data: Mapping[str, Any], conf_dir: str | os.PathLike[str] | None = None) -> Path:
    """The controller's node sizes file for the plugin: in the usage file's directory, which the
    controller can write to."""
    return usage_file(data, conf_dir).parent / NODES_FILE


def slurm_conf_path() -> Path:
    """The slurm.conf Slurm's clients read: $SLURM_CONF, else Slurm's default."""
    return Path(os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF)


def slurm_conf_dir(conf_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the files beside slurm.conf go: ``conf_dir`` when given, else $SLURM_CONF's directory."""
    return Path(conf_dir) if conf_dir is not None else slurm_conf_path().parent


def usage_max_age_s(data: Mapping[str, Any]) -> int:
    """How old a usage file may be before the plugin stops trusting it: a few missed cycles."""
    from hivebatch.controller.context import parse_settings

    return int(max(USAGE_STALE_CYCLES * parse_settings(None, dict(data)).interval_s, USAGE_MIN_AGE_S))


def lua_literal(value: Any) -> str:
    """A Python value as a Lua literal (dicts become tables; keys are always quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"no Lua literal for {value!r}")
        return repr(value)
    if isinstance(value, str):
        # control characters as decimal escapes: the text stays one line whatever a name holds
        return '"' + "".join(_lua_char(c) for c in value) + '"'
    if isinstance(value, Mapping):
        items = ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items())
        return "{ " + items + " }"
    raise TypeError(f"no Lua literal for {value!r}")


def operator_uids(names: Iterable[str]) -> dict[int, bool]:
    """uid → true for every Operator name; a name unknown on this host is a config error."""
    uids: dict[int, bool] = {}
    for name in (*ALWAYS_OPERATORS, *names):
        try:
            uids[pwd.getpwnam(name).pw_uid] = True
        except KeyError:
            raise ConfigError(
                f"operator {name!r} is not a user on this host: create it or fix --operator"
            ) from None
    return uids


def _vcs_table(spec: ClusterSpec) -> dict[str, Any]:
    return {
        vc: {
            "gpus": spec.vc_gpus(vc),
            # per GPU type: how many nodes a multi-node job of the VC can span (its whole-node cells),
            # and how many GPUs a one-node job can have (its largest cell's)
            "whole_nodes": {t.lower(): spec.vc_whole_nodes(vc, t) for t in spec.gpu_types},
            "node_gpus": {t.lower(): spec.vc_node_gpus(vc, t) for t in spec.gpu_types},
        }
        for vc in spec.vcs
    }


#: what the plugin checks a job against that an admin changes by editing the config, with its name in
#: ``hadmin vc check``'s findings: the controller's copy of these replaces the plugin's own while fresh
FOLLOWED = {
    "gpu_types": "GPU types",
    "type_list": "GPU types",
    "largest": "GPU types",
    "gpu_nodes": "GPU nodes",
    "vcs": "VCs",
    "vc_list": "VCs",
    "user_limits": "user limits",
    "max_time_min": "time limit",
}


def followed_table(data: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the plugin's site table (``FOLLOWED``) that the controller also writes into its node
    sizes file each cycle, and that the plugin takes from there while that file is fresh: so that a
    change of the cluster, the VCs, ``user_limits:`` or ``limits:`` reaches submissions with the
    controller's next cycle, and the plugin's own only count once the controller has stopped."""
    from hivebatch.cells import parse_cluster_config
    from hivebatch.userlimits import parse_user_limits, site_limits

    spec = parse_cluster_config(data)
    gpu_types: dict[str, Any] = {}
    for name in spec.gpu_types:
        gpu_types[name.lower()] = {
            "name": name,
            "max_per_node": spec.gpus_per_node(name),
            "nodes": sum(1 for n in spec.nodes if n.gpu_type == name),
            "total": spec.total_gpus(name),
            "mem_mib": spec.gpu_memory_mib(name) or 0,
        }
    largest = max(gpu_types.values(), key=lambda t: (t["max_per_node"], t["total"]))
    largest = {
        **largest,
        "nodes": len(spec.nodes),
        "total": spec.total_gpus(),
        "mem_mib": max(t["mem_mib"] for t in gpu_types.values()),
    }
    vcs = _vcs_table(spec)
    return {
        "gpu_types": gpu_types,
        "type_list": ", ".join(sorted(gpu_types)),
        "largest": largest,
        # node -> its GPU type: an --exclusive job that can land on one takes all its GPUs
        "gpu_nodes": {n.name: n.gpu_type.lower() for n in spec.nodes},
        "vcs": vcs,
        "vc_list": ", ".join(sorted(vcs)),
        "user_limits": site_limits(parse_user_limits(data, spec.vcs), spec.vcs),
        "max_time_min": parse_limits(data).time_limit_s // 60,
    }


def site_table(
    data: Mapping[str, Any], operators: Iterable[str], conf_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """What the plugin checks a GPU ask against, from a whole config mapping; ``conf_dir`` is the
    directory the plugin is written to (the usage file's default home)."""
    return {
        **followed_table(data),
        "classes": {c: True for c in CLASSES},
        "class_list": ", ".join(CLASSES),
        "default_class": DEFAULT_QOS,
        "opportunistic": PREEMPTABLE_QOS,
        "shard_mib": SHARD_MIB,
        "operator_uids": operator_uids(operators),
        "usage_file": str(usage_file(data, conf_dir)),
        "usage_max_age_s": usage_max_age_s(data),
        "nodes_file": str(nodes_file(data, conf_dir)),
        "refusals_file": str(refusals_file(data)),
    }


#: Lua both generated files hold, ahead of their own logic
SHARED_LUA = ("spread.lua",)


def _generated_lua(figures: Mapping[str, Any], logic: str) -> str:
    """A shipped Lua file (``hivebatch/data/<logic>``) with the site's figures above it, one global
    per item of ``figures``, and the Lua both files share (``SHARED_LUA``), as hadmin slurm-config
    writes both the plugin and the cli_filter."""
    head = [
        "-- generated by hadmin slurm-config from the hivebatch config; do not edit (regenerate instead)",
        *(f"{name} = {lua_literal(value)}" for name, value in figures.items()),
        "",
    ]
    data = resources.files("hivebatch").joinpath("data")
    return "\n".join(head) + "".join(
        data.joinpath(name).read_text(encoding="utf-8") for name in (*SHARED_LUA, logic)
    )


def cli_filter_lua(data: Mapping[str, Any], operators: Iterable[str] = ()) -> str:
    """cli_filter.lua with the cluster's GPU models above it (lower case, as slurm.conf names them as
    node features): srun's ask for one of them becomes a --constraint; another it leaves to the plugin,
    which says which models there are. And the Operators' names: the plugin leaves their jobs as Slurm
    has them, so the filter leaves a new job's GPU ask over several nodes as they gave it."""
    from hivebatch.cells import parse_cluster_config

    models = {name.lower(): True for name in parse_cluster_config(data).gpu_types}
    names = {name: True for name in (*ALWAYS_OPERATORS, *operators)}
    return _generated_lua({"HIVEBATCH_GPU_MODELS": models, "HIVEBATCH_OPERATORS": names}, "cli_filter.lua")


def job_submit_lua(
    data: Mapping[str, Any], operators: Iterable[str], conf_dir: str | os.PathLike[str] | None = None
) -> str:
    """The complete job_submit.lua for slurm.conf's directory (``conf_dir``, default $SLURM_CONF's)."""
    return _generated_lua({"HIVEBATCH_SITE": site_table(data, operators, conf_dir)}, "job_submit.lua")
