"""Step 1: one consistent look at Slurm — jobs, nodes and the GPU indices in use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hivebatch.db.models import utcnow
from hivebatch.request import ADMIN_PREFIX
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import (
    STOPPED_PARTITION_STATES,
    PartitionAccess,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
)
from hivebatch.slurmconf import PREEMPTABLE_QOS

# Slurm job states, grouped by what they mean for the GPUs a job holds.
RUNNING_STATES = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING"}
)
PENDING_STATES = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "RESV_DEL_HOLD"}
)
FINAL_STATE_MAP = {
    "COMPLETED": "done",
    "CANCELLED": "cancelled",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "PREEMPTED": "preempted",
    "REVOKED": "cancelled",
}


def phase(state: str) -> str:
    """'running', 'pending' or a final ledger state ('done', 'failed', 'cancelled', 'preempted')."""
    base = (state or "").split()[0].upper().rstrip("+") if state else ""
    if base in RUNNING_STATES:
        return "running"
    if base in PENDING_STATES or not base:
        return "pending"
    return FINAL_STATE_MAP.get(base, "failed")


def to_utc(value: dt.datetime | None) -> dt.datetime | None:
    """Naive UTC, whatever the backend returned (aware, or naive local time as Slurm prints it)."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).replace(tzinfo=None)


@dataclass
class Observation:
    now: dt.datetime
    jobs: dict[int, SlurmJob]
    nodes: dict[str, SlurmNode]
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    #: each license's free count, listed only when some job asks for one (None: not listed)
    licenses: dict[str, int] | None = None


def list_nodes(backend: SlurmBackend) -> dict[str, SlurmNode]:
    """Every node as Slurm lists it, with the reservations on it and its partitions Slurm starts no
    job in."""
    nodes = {n.name: n for n in backend.list_nodes()}
    for r in backend.list_reservations():
        for name in r.nodes:
            if name in nodes:
                nodes[name].reserved.append((r.start, r.end, r.name))
    for p in backend.list_partitions():
        for name in nodes if p.nodes == ("ALL",) else p.nodes:
            if name not in nodes:
                continue
            if p.state in STOPPED_PARTITION_STATES:
                nodes[name].stopped[p.name] = p.state
            if p.max_time_s is not None:
                nodes[name].max_time_s[p.name] = p.max_time_s
            if p.max_cpus_per_node is not None:
                nodes[name].max_cpus[p.name] = p.max_cpus_per_node
            if p.access != PartitionAccess():
                nodes[name].access[p.name] = p.access
            if p.max_mem_per_node_mb is not None:
                nodes[name].max_mem_mb[p.name] = p.max_mem_per_node_mb
            if p.min_nodes > 1 or p.max_nodes:
                nodes[name].node_limits[p.name] = (p.min_nodes, p.max_nodes)
            if p.cpu_rows > 1:
                nodes[name].cpu_rows[p.name] = p.cpu_rows
            if p.exclusive_user:
                nodes[name].user_exclusive.add(p.name)
    return nodes


def _may_be_told_to_leave(job: SlurmJob) -> bool:
    """An opportunistic GPU job of hivebatch's (its request in the admin comment): the controller may
    requeue it for a guaranteed job. Foreign work it only watches."""
    return (
        job.qos == PREEMPTABLE_QOS
        and bool(job.gpus or job.shards)
        and job.admin_comment.startswith(ADMIN_PREFIX)
    )


def count_running_jobs(jobs: Iterable[SlurmJob], nodes: Mapping[str, SlurmNode]) -> None:
    """Add to each node the CPUs its running jobs hold (a job on several nodes at its even share: squeue
    gives its total): in all, in each of its partitions with a MaxCPUsPerNode, and job by job where they
    share CPUs in a partition that lets them; whose jobs run there, and what jobs Slurm may preempt for
    others hold."""
    for job in jobs:
        if phase(job.state) != "running" or not job.nodes:
            continue
        share = -(-job.cpus_total // len(job.nodes))
        for name in job.nodes:
            node = nodes.get(name)
            if node is None:
                continue
            node.cpus_held += share
            node.users.add(job.user)
            if not _may_be_told_to_leave(job):
                node.firm_users.add(job.user)
            if job.qos == PREEMPTABLE_QOS:
                node.preemptible_cpus += share
                node.preemptible_mem_mb += node.mem_mb if job.whole_node_memory else job.mem_on_node_mb(share)
            if job.partition in node.max_cpus:
                node.cpus_in_partition[job.partition] = node.cpus_in_partition.get(job.partition, 0) + share
            if share and job.shares_cpus and job.partition in node.cpu_rows:
                node.shared_cpus.setdefault(job.partition, []).append(share)


def _follow_site_kill_of_invalid_dependencies(backend: SlurmBackend, jobs: Iterable[SlurmJob]) -> None:
    """Mark the jobs the cluster's DependencyParameters=kill_invalid_depend decides for; Slurm's
    configuration is asked only while a job waits on a dependency and asked neither way."""
    undecided = [j for j in jobs if j.dependency and j.kill_invalid_dep is None]
    if undecided and backend.kills_invalid_dependencies():
        for j in undecided:
            j.site_kills_invalid_dep = True


def observe(backend: SlurmBackend) -> Observation:
    """List every job and node once (one squeue-like and one sinfo-like call, never one per job), and
    the reservations on the nodes.

    Raises SlurmUnavailable when Slurm's answer cannot be trusted: a command failed or reported an
    error, or no node has registered with slurmctld (just restarted: node states and GPU use are
    unknown). The cycle then changes nothing.
    """
    import time

    t0 = time.perf_counter()
    now = utcnow()
    try:
        jobs = {int(j.job_id): j for j in backend.list_jobs()}
        nodes = list_nodes(backend)
        count_running_jobs(jobs.values(), nodes)
        licenses = backend.list_licenses() if any(j.licenses for j in jobs.values()) else None
        _follow_site_kill_of_invalid_dependencies(backend, jobs.values())
    except SlurmUnavailable:
        raise
    except SlurmError as exc:
        first = (exc.stderr.strip().splitlines() or [f"exit {exc.returncode}"])[0]
        raise SlurmUnavailable(exc.command, first, exc.returncode) from None
    if not any(n.responding for n in nodes.values()):
        raise SlurmUnavailable(
            ["sinfo", "--json"], "no node has registered with slurmctld (all UNKNOWN or NOT_RESPONDING)"
        )
    return Observation(now=now, jobs=jobs, nodes=nodes, seconds=time.perf_counter() - t0, licenses=licenses)
