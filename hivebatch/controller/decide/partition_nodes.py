"""The node counts a job's partitions allow (MinNodes, MaxNodes), as Slurm applies them.

Recorded on the lab (tests/fixtures/slurm/partition_node_limits.txt): in a partition of MaxNodes=1
Slurm refuses at submit a job whose tasks need two nodes and leaves `-N 2` pending for ever
(PartitionNodeLimit, under the default EnforcePartLimits=NO); in one of MinNodes=2 it runs a job
without a node count, or with a range that allows it, on two nodes with its per-node GPUs on each, and
leaves `-N 1` pending. Pinned as asked, such jobs held their cells and never started.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hivebatch.slurm.types import SlurmJob


@dataclass(frozen=True)
class NodeRange:
    """The fewest nodes Slurm runs a job of its partitions on and the most (0: any), the loosest of the
    partitions it asked for, and the limits that set them, as its owner reads them."""

    fewest: int = 1
    most: int = 0
    fewest_where: str = ""
    most_where: str = ""


#: partitions that set no node count
ANY_COUNT = NodeRange()


def partition_node_range(sj: SlurmJob, limits: Mapping[str, tuple[int, int]]) -> NodeRange:
    """``limits``: partition -> (MinNodes, MaxNodes; 0: none), for the partitions that set one."""
    asked = sj.partitions
    if not asked or not any(p in limits for p in asked):
        return ANY_COUNT
    each = {p: limits.get(p, (1, 0)) for p in asked}
    fewest = min(lo for lo, _ in each.values())
    most = 0 if any(hi == 0 for _, hi in each.values()) else max(hi for _, hi in each.values())
    return NodeRange(
        fewest,
        most,
        ", ".join(f"{p}'s MinNodes is {lo}" for p, (lo, _) in each.items() if lo > 1),
        ", ".join(f"{p}'s MaxNodes is {hi}" for p, (_, hi) in each.items() if hi),
    )


def outside_partition_nodes(sj: SlurmJob, limits: Mapping[str, tuple[int, int]]) -> str | None:
    """Why Slurm never starts the job: the nodes it needs are more than its partitions allow, or its
    owner's most (-N) fewer than they require; None otherwise. Its owner may change the count."""
    rng = partition_node_range(sj, limits)
    if rng.most and sj.num_nodes > rng.most:
        fix = (
            f"lower it (scontrol update job {sj.display_id} NumNodes={rng.most}) or cancel it"
            if sj.max_nodes
            else "cancel it and submit it again with fewer tasks or CPUs (-n, -c, --ntasks-per-node)"
        )
        return f"it needs {sj.num_nodes} nodes, more than Slurm allows: partition {rng.most_where}; {fix}"
    if sj.max_nodes and sj.max_nodes < rng.fewest:
        return (
            f"it asks for at most {sj.max_nodes} nodes (-N), fewer than Slurm allows: partition "
            f"{rng.fewest_where}; raise it (scontrol update job {sj.display_id} NumNodes={rng.fewest}) or cancel it"
        )
    return None
