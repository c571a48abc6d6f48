"""The largest figures of the GPU nodes (CPUs, memory, disk, layout), for the job_submit plugin's test
at submit.

Slurm refuses at submit a job no node could ever hold, but it skips that test for a held job, and the
plugin holds every GPU job (tests/fixtures/slurm/held_job_sizes.txt). The plugin cannot ask Slurm for
node sizes (22.05's Lua API has none), so the controller writes them each cycle next to the usage file
(``hivebatch_nodes.lua``): a Lua chunk returning, per GPU type and over all of them (``any``), the
most CPUs, MB of memory, MB of temporary disk, sockets, cores per socket and threads per core one
node has, and each GPU node's own figures (the plugin takes the largest within a job's partitions).
The plugin reads it as it reads the usage file: data only, and not at all once it is stale.

The file also carries what the plugin checks a job against as the controller's config has it
(``site``: GPU types and nodes, VCs, strict class limits, the time limit), which the plugin prefers
to what was written into it while the file is fresh, so an admin's edit of the config reaches
submissions with the controller's next cycle instead of waiting for the plugin to be written again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from hivebatch.jobsubmit import lua_literal
from hivebatch.slurm.types import SlurmNode
from hivebatch.userlimits import aware_utc

#: the key of the figures over every GPU type, for a job that names none
ANY_TYPE = "any"


def _figures(node: SlurmNode) -> dict[str, int]:
    """The figures the plugin tests a job against, 0 where Slurm reported none; the temporary disk only
    where it did, as 0 MB of it is a figure: Slurm refuses any ``--tmp`` where slurm.conf gives none."""
    figures = {
        "cpus": node.cpus,
        "mem_mb": node.mem_mb,
        "sockets": node.sockets,
        "cores": node.cores_per_socket,
        "threads": node.threads_per_core,
    }
    if node.tmp_disk_mb is not None:
        figures["tmp_mb"] = node.tmp_disk_mb
    return figures


def node_sizes(figures: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per GPU type (lower case, as the plugin keys them) and ``any``: the most of each figure one node
    has, from ``node_figures`` (only nodes with GPUs), and only the figures Slurm reported (a node it
    lists without CPUs or memory adds nothing)."""
    sizes: dict[str, dict[str, int]] = {}
    for node in figures.values():
        for key in (node["type"], ANY_TYPE):
            most = sizes.setdefault(key, {})
            for name, value in node.items():
                if name != "type":
                    most[name] = max(most.get(name, 0), value)
    # a size Slurm did not report is left out, so the plugin tests nothing against it
    return {key: {k: v for k, v in most.items() if v > 0 or k == "tmp_mb"} for key, most in sizes.items()}


def node_figures(nodes: Iterable[SlurmNode], gpu_type_of: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Each GPU node's GPU type (lower case) and figures: the plugin takes the largest within the
    partitions a job may run in, which slurmctld names to it."""
    return {
        n.name: {"type": gpu_type_of[n.name].lower(), **_figures(n)}
        for n in sorted(nodes, key=lambda n: n.name)
        if n.name in gpu_type_of
    }


def node_sizes_lua(
    sizes: Mapping[str, Mapping[str, int]],
    now: dt.datetime,
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    site: Mapping[str, Any] | None = None,
) -> str:
    """The node sizes file's text: one ``return { ... }`` chunk; ``site`` is the part of the plugin's
    site table the plugin follows (``jobsubmit.followed_table``) as the controller's config has it."""
    table: dict[str, Any] = {
        "written_at": int(aware_utc(now).timestamp()),
        "sizes": dict(sorted(sizes.items())),
    }
    if nodes:
        table["nodes"] = dict(nodes)
    if site is not None:
        table["site"] = dict(site)
    return (
        "-- written by the hivebatch controller each cycle; read by job_submit.lua; do not edit\n"
        f"return {lua_literal(table)}\n"
    )
