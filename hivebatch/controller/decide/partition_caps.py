"""What a partition lets one job use of a node: MaxCPUsPerNode (the CPUs of all its jobs there) and
MaxMemPerNode (each job's memory there), as Slurm bounds them.

Recorded on the lab: with MaxCPUsPerNode=8 on 16-CPU nodes Slurm spread `-n 16` over two nodes, refused
`-N 1 -c 12` at submit and kept an 8-CPU job pending beside another of the partition
(tests/fixtures/slurm/partition_max_cpus.txt); with MaxMemPerNode=30000 it spread `-n 16
--mem-per-cpu=3000` over two nodes and left `--mem=40000` pending for ever, MaxMemPerLimit, while
hivebatch's pin of either was refused by Slurm every cycle (partition_max_mem.txt).
"""

from __future__ import annotations

from collections.abc import Mapping

from hivebatch.slurm.types import SlurmJob, SlurmNode


def partitions_here(sj: SlurmJob, node: SlurmNode) -> list[str]:
    """The job's partitions ``node`` is in (all it asked for where Slurm lists none for the node)."""
    asked = sj.partitions or node.partitions
    return [p for p in asked if p in node.partitions] if node.partitions else asked


def in_partitions(sj: SlurmJob, node: SlurmNode) -> bool:
    """Whether ``node`` is in one of the job's partitions (or either lists none)."""
    return not (sj.partitions and node.partitions and not set(sj.partitions) & set(node.partitions))


def _loosest(
    here: list[str], caps: Mapping[str, int], used: Mapping[str, int] | None = None
) -> tuple[str, int, int] | None:
    """Of ``here``, the partition with the most left under its cap, the cap and what is left; None when
    one of them has no cap."""
    if not here or any(p not in caps for p in here):
        return None
    taken = used or {}
    best = max(here, key=lambda p: caps[p] - taken.get(p, 0))
    return best, caps[best], max(0, caps[best] - taken.get(best, 0))


def partition_cpus(sj: SlurmJob, node: SlurmNode) -> tuple[str, int, int] | None:
    """The job's partition on ``node`` with the most CPUs left under its MaxCPUsPerNode, that cap, and
    the CPUs its running jobs leave of it there; None when one of the job's partitions there has no cap
    (Slurm then gives the job any of the node's CPUs)."""
    return _loosest(partitions_here(sj, node), node.max_cpus, node.cpus_in_partition)


def partition_mem(sj: SlurmJob, node: SlurmNode) -> tuple[str, int] | None:
    """The job's partition on ``node`` with the largest MaxMemPerNode (MB), and that cap; None when one
    of the job's partitions there has none."""
    capped = _loosest(partitions_here(sj, node), node.max_mem_mb)
    return None if capped is None else capped[:2]


def job_cpus(sj: SlurmJob, node: SlurmNode) -> int:
    """The most CPUs of ``node`` Slurm gives one job of ``sj``'s partitions (0: not reported)."""
    capped = partition_cpus(sj, node)
    return min(node.cpus, capped[1]) if capped is not None and node.cpus else node.cpus


def job_mem(sj: SlurmJob, node: SlurmNode) -> int:
    """The most memory (MB) of ``node`` Slurm gives one job of ``sj``'s partitions (0: not reported)."""
    capped = partition_mem(sj, node)
    return min(node.mem_mb, capped[1]) if capped is not None and node.mem_mb else node.mem_mb


def over_partition_caps(sj: SlurmJob, node: SlurmNode) -> str | None:
    """Why the job's partitions never let it run on ``node`` as asked: more CPUs or memory on one node
    than their caps; None otherwise."""
    cpus = partition_cpus(sj, node)
    if cpus is not None and sj.cpus_per_node > cpus[1]:
        return f"partition {cpus[0]} lets a job use {cpus[1]} of its CPUs (MaxCPUsPerNode), the job needs {sj.cpus_per_node}"
    mem = partition_mem(sj, node)
    if mem is not None and sj.mem_per_node_mb > mem[1]:
        return f"partition {mem[0]} lets a job use {mem[1]} MB of its memory (MaxMemPerNode), the job needs {sj.mem_per_node_mb}"
    return None


def partition_cpus_short(sj: SlurmJob, node: SlurmNode) -> str | None:
    """Why the CPUs the job's partition leaves free on ``node`` now are too few; None when they are not."""
    capped = partition_cpus(sj, node)
    if capped is not None and sj.cpus_per_node > capped[2]:
        name, cap, left = capped
        return f"{left} of the {cap} CPUs partition {name} allows free, the job needs {sj.cpus_per_node}"
    return None
