"""CPUs shared as a partition's OverSubscribe lets them be (``YES:N`` for jobs that ask --oversubscribe,
``FORCE:N`` for all): select/cons_tres keeps N rows of the node's CPUs per such partition and starts a
sharing job where one row has its CPUs free. CPUs held by jobs of other partitions, or by jobs that
share none, are free in no row (cons_common/job_test.c, steps 3 and 4).

Recorded on the lab (tests/fixtures/slurm/partition_oversubscribe.txt): with FORCE:3 plain Slurm ran
three 16-CPU jobs on each 16-CPU node; with FORCE:2 it kept a 12-CPU job pending beside two of 10
(each row had 6 free, though 12 of the 32 were); a partition gpu job holding all 16 CPUs kept every
job of the FORCE partition off the node.
"""

from __future__ import annotations

from hivebatch.controller.decide.partition_caps import partitions_here
from hivebatch.slurm.types import SlurmJob, SlurmNode


def row_frees(node: SlurmNode, partition: str) -> list[int]:
    """The CPUs free in each of ``partition``'s rows on ``node``. Slurm does not report which row a job
    is in: its running sharing jobs are packed biggest first, each into the first row it fits, as
    Slurm's own row sort packs them."""
    rows = node.cpu_rows.get(partition, 1)
    sharing = node.shared_cpus.get(partition, [])
    room = max(0, node.cpus - (node.cpus_held - sum(sharing)))
    used = [0] * rows
    for cpus in sorted(sharing, reverse=True):
        fits = [i for i, u in enumerate(used) if u + cpus <= room]
        used[fits[0] if fits else used.index(min(used))] += cpus
    return [max(0, room - u) for u in used]


def node_rows(node: SlurmNode) -> dict[str, list[int]]:
    """Every partition of ``node`` whose jobs may share CPUs there, and the CPUs free in each row."""
    return {p: row_frees(node, p) for p in node.cpu_rows}


def sharing_partition(sj: SlurmJob, node: SlurmNode) -> tuple[str, int, int] | None:
    """The job's partition on ``node`` where it shares CPUs with the most free in one row: its name, how
    many jobs share a CPU there and those free CPUs; None when the job shares in none of them."""
    if not sj.shares_cpus:
        return None
    here = [
        (p, node.cpu_rows[p], max(row_frees(node, p)))
        for p in partitions_here(sj, node)
        if p in node.cpu_rows
    ]
    return max(here, key=lambda item: item[2]) if here else None


def cpus_short(sj: SlurmJob, node: SlurmNode) -> str | None:
    """Why ``node``'s CPUs free now are too few for ``sj``: those no job holds, or, for a job that shares
    them, the most free in one row of its partition there; None when they are not."""
    if not node.cpus:
        return None
    shared = sharing_partition(sj, node)
    free = node.cpus_free if shared is None else max(node.cpus_free, shared[2])
    if sj.cpus_per_node <= free:
        return None
    if shared is None:
        return f"{free} CPUs free, the job needs {sj.cpus_per_node}"
    name, rows, _ = shared
    return (
        f"{free} CPUs free, even with {rows} jobs sharing a CPU as partition {name} lets them (OverSubscribe), "
        f"the job needs {sj.cpus_per_node}"
    )
