"""Whether a node has what a job needs besides GPUs, so that Slurm can start the job where it is pinned.

Slurm stays the judge; this only keeps hivebatch from pinning a job where Slurm would leave it pending:
the job's partition(s), its ``--constraint`` (plain AND/OR of features; bracketed or counted forms
are left to Slurm), nodes it excluded, partitions an admin set DOWN or INACTIVE, the CPUs and memory
per node it asked for against what the node has free now (all of it for ``--mem=0``), and
reservations its time limit would run into. A node where a pinned job did not start before is avoided
too (``avoided``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from hivebatch.controller.decide.cpu_sharing import cpus_short, node_rows
from hivebatch.controller.decide.partition_caps import (
    in_partitions,
    over_partition_caps,
    partition_cpus_short,
    partitions_here,
)
from hivebatch.node_room import NodeNeeds, NodeRoom, not_yielding, users_in_the_way
from hivebatch.slurm.parse import expand_hostlist
from hivebatch.slurm.types import SlurmJob, SlurmNode
from hivebatch.slurmconf import PREEMPTABLE_QOS, QOS_PRIORITIES

_SIMPLE_FEATURES = re.compile(r"^[\w.-]+([&,|][\w.-]+)*$")


def features_met(expr: str, have: list[str]) -> bool:
    """``a&b``, ``a,b`` (AND) and ``a|b`` (OR, binding looser) against a node's active features."""
    if not expr or not _SIMPLE_FEATURES.match(expr):
        return True  # none asked, or a form only Slurm reads (brackets, counts): Slurm judges
    return any(all(f in have for f in re.split(r"[&,]", alt)) for alt in expr.split("|"))


# the owner's own choices of nodes, which they may change while the job waits
EXCLUDED = "excluded by the job"
OUTSIDE = "not in partition"
UNLISTED = "not in its --nodelist"
_ELSEWHERE = (OUTSIDE, EXCLUDED, UNLISTED)


def why_never(sj: SlurmJob, node: SlurmNode) -> str | None:
    """Why Slurm could never start ``sj`` on ``node``, whatever else runs there (what the node is, not
    what it has free); None when it could some day."""
    if not in_partitions(sj, node):
        return f"{OUTSIDE} {sj.partition}"
    if sj.reservation:
        return None  # a reservation's own nodes: Slurm places such jobs itself (the plugin passes them)
    if node.name in sj.excluded_nodes:
        return EXCLUDED
    if not features_met(sj.features, node.features):
        return f"lacks feature {sj.features}"
    if node.cpus and sj.cpus_per_node > node.cpus:
        return f"has {node.cpus} CPUs, the job needs {sj.cpus_per_node}"
    capped = over_partition_caps(sj, node)
    if capped is not None:
        return capped
    if node.mem_mb and sj.mem_per_node_mb > node.mem_mb:
        return f"has {node.mem_mb} MB memory, the job needs {sj.mem_per_node_mb}"
    if node.tmp_disk_mb is not None and sj.tmp_disk_mb > node.tmp_disk_mb:
        return f"has {node.tmp_disk_mb} MB temporary disk, the job needs {sj.tmp_disk_mb} (--tmp)"
    return _layout_short(sj, node)


def _layout_short(sj: SlurmJob, node: SlurmNode) -> str | None:
    """The node's sockets, cores per socket or threads per core short of what the job asks (-B ...)."""
    for have, need, one, many in (
        (node.sockets, sj.sockets_per_node, "socket", "sockets"),
        (node.cores_per_socket, sj.cores_per_socket, "core per socket", "cores per socket"),
        (node.threads_per_core, sj.threads_per_core, "thread per core", "threads per core"),
    ):
        if have and need > have:
            return f"has {have} {one if have == 1 else many}, the job needs {need}"
    # a socket's CPUs bound its tasks (cons_common.c can_job_run_on_node)
    per_socket = node.cores_per_socket * node.threads_per_core
    if per_socket and sj.tasks_per_socket > per_socket:
        return f"has {per_socket} CPUs on a socket, the job asks {sj.tasks_per_socket} tasks per socket"
    return None


def reserved_until(sj: SlurmJob, node: SlurmNode, now: dt.datetime) -> tuple[dt.datetime, str] | None:
    """The end and name of the reservation on ``node`` that ``sj``, started now, would run into (its time
    limit ends after the reservation starts; no limit runs into any); None when there is none. A job that
    asks for a reservation is Slurm's to place."""
    if sj.reservation:
        return None
    end = now + dt.timedelta(seconds=sj.time_limit_s) if sj.time_limit_s else None
    hit = [(stop, name) for start, stop, name in node.reserved if stop > now and (end is None or start < end)]
    return max(hit) if hit else None


def clear_of_reservations(sj: SlurmJob, node: SlurmNode, now: dt.datetime) -> dt.datetime:
    """The first time from ``now`` at which ``sj`` could start on ``node`` without running into a
    reservation there."""
    at = now
    while (blocked := reserved_until(sj, node, at)) is not None:
        at = blocked[0]
    return at


def _stopped_partition(sj: SlurmJob, node: SlurmNode) -> str | None:
    """The job's partition on ``node`` in which Slurm starts no job now (DOWN or INACTIVE), when every
    partition of the job the node is in is such."""
    here = partitions_here(sj, node)
    if node.stopped and here and all(p in node.stopped for p in here):
        return f"its partition {here[0]} is {node.stopped[here[0]]}"
    return None


def _kept_to_other_user(sj: SlurmJob, node: SlurmNode) -> str | None:
    """Why Slurm starts no job of the user's on ``node`` now: another user's job of an ExclusiveUser
    partition holds it, or the job's partition is such and another user's job runs there."""
    keeping = users_keeping(sj, node)
    if not keeping:
        return None
    other = keeping[0]
    if other == node.owner:
        return f"user {other}'s alone while their job of an ExclusiveUser partition runs there"
    return f"user {other}'s job runs there, and partition {sj.partition} keeps a node to one user (ExclusiveUser)"


def users_keeping(sj: SlurmJob, node: SlurmNode) -> list[str]:
    """The users whose jobs keep ``node`` from ``sj`` until the last of them there ends (the owner first):
    those in its way (ExclusiveUser) but those whose jobs it may tell to leave."""
    return not_yielding(
        _users_in_the_way(sj, node), node.yielding_users if preempts_opportunistic(sj) else frozenset()
    )


def yielding_in_the_way(sj: SlurmJob, node: SlurmNode) -> frozenset[str]:
    """The users keeping ``node`` from ``sj`` (ExclusiveUser) whose jobs there it may tell to leave: all
    opportunistic GPU jobs, for a job that preempts them. Slurm does not requeue those for it
    (tests/fixtures/slurm/exclusive_user_opportunistic.txt)."""
    if not preempts_opportunistic(sj):
        return frozenset()
    return node.yielding_users.intersection(_users_in_the_way(sj, node))


def _users_in_the_way(sj: SlurmJob, node: SlurmNode) -> list[str]:
    """``node_room.users_in_the_way`` for ``sj`` on ``node``; none at once where no partition or owner
    keeps the node to one user, as on most nodes."""
    if not (node.owner or node.user_exclusive):
        return []
    return users_in_the_way(
        sj.user, sj.partitions, node.owner, node.users, node.partitions, node.user_exclusive
    )


def preempts_opportunistic(sj: SlurmJob) -> bool:
    """Whether Slurm requeues running opportunistic jobs to start ``sj`` (its QOS is a guaranteed class's,
    each of which hadmin slurm-config gives Preempt=opportunistic)."""
    return sj.qos in QOS_PRIORITIES and sj.qos != PREEMPTABLE_QOS


def as_preemptor_finds(sj: SlurmJob, node: SlurmNode) -> SlurmNode:
    """``node`` as Slurm sees it for ``sj``: the CPUs and memory of the opportunistic jobs running there
    count as free when it would requeue them for ``sj`` (preempt_qos_node_resources.txt)."""
    if not (node.preemptible_cpus or node.preemptible_mem_mb) or not preempts_opportunistic(sj):
        return node
    return replace(
        node,
        cpus_free=min(node.cpus, node.cpus_free + node.preemptible_cpus),
        mem_free_mb=min(node.mem_mb, node.mem_free_mb + node.preemptible_mem_mb),
    )


def why_unfit(sj: SlurmJob, node: SlurmNode, now: dt.datetime | None = None) -> str | None:
    """Why Slurm would not start ``sj`` on ``node`` now (naive UTC; None: reservations are not judged),
    in a few words; None when it could."""
    never = why_never(sj, node)
    if never or sj.reservation:
        return never
    stopped = _stopped_partition(sj, node)
    if stopped:
        return stopped
    blocked = reserved_until(sj, node, now) if now is not None else None
    if blocked is not None:
        stop, name = blocked
        return f"reserved ({name}) until {stop:%Y-%m-%d %H:%M} UTC, which its time limit would run into"
    node = as_preemptor_finds(sj, node)
    short = _kept_to_other_user(sj, node) or cpus_short(sj, node) or partition_cpus_short(sj, node)
    if short is not None:
        return short
    if node.mem_mb and sj.mem_per_node_mb > node.mem_free_mb:
        return f"{node.mem_free_mb} MB memory free, the job needs {sj.mem_per_node_mb}"
    if sj.whole_node_memory and node.mem_mb and node.mem_free_mb < node.mem_mb:
        return f"{node.mem_mb - node.mem_free_mb} MB memory held by other jobs, the job needs all of it (--mem=0)"
    return None


Needs = tuple[str, str, tuple[str, ...], str, int, int, bool, bool, str, bool]


def node_needs(sj: SlurmJob, nodes: int = 1) -> NodeNeeds:
    """What the job takes of each node it runs on besides GPUs, as the round counts it, on at most
    ``nodes`` nodes: its tasks' CPUs are all on one node when pinned to one (``-n 16 --gres=gpu:1``, or
    ``-B 2:8:1``, whose MinCPUsNode stays 1: tests/fixtures/slurm/held_job_sizes.txt), and spread at
    best evenly over more; their memory per CPU (--mem-per-cpu, DefMemPerCPU) with them."""
    cpus = max(sj.cpus_per_node, -(-sj.cpus_total // max(nodes, 1)))
    mem = sj.mem_on_node_mb(cpus)
    partitions = tuple(sj.partitions)
    return NodeNeeds(cpus, mem, sj.whole_node_memory, partitions if sj.shares_cpus else (), sj.user, partitions,
                     preempts_opportunistic(sj))  # fmt: skip


def node_room(node: SlurmNode) -> NodeRoom:
    """What ``node`` has free now, as Slurm reports it."""
    return NodeRoom(node.cpus, node.cpus_free, node.mem_mb, node.mem_free_mb, node_rows(node), node.owner,
                    set(node.users), tuple(node.partitions), frozenset(node.user_exclusive),
                    node.preemptible_cpus, node.preemptible_mem_mb, node.yielding_users)  # fmt: skip


def node_rooms(
    nodes: Mapping[str, SlurmNode], pins: Iterable[tuple[SlurmJob, Iterable[str]]]
) -> dict[str, NodeRoom]:
    """What each node has left for new pins: what Slurm reports free, less what ``pins`` (jobs pinned
    there that Slurm has not started: it counts a job's CPUs and memory only once it runs) will take."""
    rooms = {name: node_room(n) for name, n in nodes.items()}
    for sj, names in pins:
        on = list(names)
        for name in on:
            if name in rooms:
                rooms[name].take(node_needs(sj, len(on)))
    return rooms


def short_text(room: NodeRoom, needs: NodeNeeds) -> str:
    """Why a node's room left after the pins on it does not fit ``needs``."""
    other = room.other_user(needs)
    if other:
        return f"user {other}'s job pinned there keeps the node to one user (ExclusiveUser)"
    if room.cpus and needs.cpus > room.cpus_left(needs):
        return f"{room.cpus_left(needs)} CPUs left beside the jobs pinned there, the job needs {needs.cpus}"
    if room.mem_mb and needs.mem_mb > room.mem_left(needs):
        return f"{room.mem_left(needs)} MB memory left beside the jobs pinned there, the job needs {needs.mem_mb}"
    return "memory taken by the jobs pinned there, the job needs all of it (--mem=0)"


def short_nodes(rooms: Mapping[str, NodeRoom], needs: NodeNeeds) -> dict[str, str]:
    """The nodes whose room left does not fit ``needs``, and why."""
    return {n: short_text(room, needs) for n, room in rooms.items() if not room.fits(needs)}


def needs_of(sj: SlurmJob, by_user: bool = False) -> Needs:
    """What ``why_unfit`` reads of a job: jobs with the same needs are unfit on the same nodes. Its user
    only where ``by_user`` (some node is kept to one user), its QOS only as whether it preempts
    opportunistic jobs: jobs of many users and classes then share one answer."""
    return (sj.partition, sj.reservation, tuple(sj.excluded_nodes), sj.features, sj.cpus_per_node,
            sj.mem_per_node_mb, sj.whole_node_memory, sj.shares_cpus, sj.user if by_user else "",
            preempts_opportunistic(sj))  # fmt: skip


def unfit_nodes(
    sj: SlurmJob,
    nodes: Mapping[str, SlurmNode],
    avoided: frozenset[str] = frozenset(),
    wanted: str = "",
    *,
    ever: bool = False,
    now: dt.datetime | None = None,
) -> dict[str, str]:
    """Every node the job cannot use now (``ever``: can never use), with the reason. ``wanted``: its
    owner's --nodelist (a hostlist, as Slurm keeps it), whose nodes sbatch counted into the job's node
    count."""
    out = {} if ever else {name: "Slurm did not start the job there before" for name in avoided}
    if wanted:
        listed = set(expand_hostlist(wanted))
        out.update({name: f"{UNLISTED} {wanted}" for name in nodes if name not in listed})
    for name, node in nodes.items():
        why = why_never(sj, node) if ever else why_unfit(sj, node, now)
        if why and name not in out:
            out[name] = why
    return out


def unfit_text(unfit: Mapping[str, str], limit: int = 3) -> str:
    """``node1: 2 CPUs free, the job needs 8; node3: not in partition debug`` (the first few). Nodes the
    job may not use (outside its partitions, excluded or not listed by it) come last: they say nothing of
    what keeps it from the nodes it may use."""
    items = sorted(unfit.items(), key=lambda item: (item[1].startswith(_ELSEWHERE), item[0]))
    text = "; ".join(f"{n}: {why}" for n, why in items[:limit])
    return text + (f"; and {len(items) - limit} more" if len(items) > limit else "")
