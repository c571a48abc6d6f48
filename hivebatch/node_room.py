"""What a job needs of each node besides GPUs, and what a node has left of it during one round.

The cells choose GPUs; Slurm starts a pinned job only where its CPUs and memory fit too. Each node is
checked against what Slurm reports free, but jobs placed in the same round, and pins Slurm has not
started yet, take from the same nodes without Slurm counting them: on the lab four ``-c 16`` GPU jobs
were pinned to one 16-CPU node in one cycle, and three waited while three nodes stood idle. The
scheduler keeps a ``NodeRoom`` per node for the round and takes each placement's needs from it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence, Set
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeNeeds:
    """Per node: CPUs and MB of memory, or all of its memory (``--mem=0``); ``shares_in``: the partitions
    in which its CPUs may be shared with other jobs (OverSubscribe, --oversubscribe); whose job it is and
    its partitions, where a partition keeps a node to one user (ExclusiveUser)."""

    cpus: int = 0
    mem_mb: int = 0
    whole_memory: bool = False
    shares_in: tuple[str, ...] = ()
    user: str = ""
    partitions: tuple[str, ...] = ()
    preempts: bool = False  # Slurm requeues running opportunistic jobs for it (preempt/qos)


def kept_to_one_user(
    job_partitions: Sequence[str], node_partitions: Collection[str], user_exclusive: Collection[str]
) -> bool:
    """Whether every partition of the job's that the node is in is ExclusiveUser (else Slurm may run it in
    another)."""
    here = [p for p in job_partitions if p in node_partitions] if node_partitions else job_partitions
    return bool(user_exclusive and here) and all(p in user_exclusive for p in here)


def users_in_the_way(
    user: str,
    job_partitions: Sequence[str],
    owner: str,
    users: Set[str],
    node_partitions: Collection[str],
    user_exclusive: Collection[str],
) -> list[str]:
    """The other users whose jobs keep ``user``'s job off a node, the owner first: the node's owner, and,
    where the job's partition keeps a node to one user, every user whose job runs or is pinned there."""
    if not user:
        return []
    found = [owner] if owner and owner != user else []
    if kept_to_one_user(job_partitions, node_partitions, user_exclusive):
        found += sorted(users - {user, owner})
    return found


def not_yielding(in_the_way: Sequence[str], yielding: Set[str]) -> list[str]:
    """The users in the way whose jobs there the job may not tell to leave (``yielding``: all
    opportunistic, and the job preempts them), in their order."""
    return [u for u in in_the_way if u not in yielding]


@dataclass
class NodeRoom:
    """A node's CPUs and memory, all and still free (0 in ``cpus`` or ``mem_mb``: not reported, no check);
    ``rows``: for each partition whose jobs may share CPUs there, the CPUs free in each of its rows;
    ``owner``: the user whose jobs alone may start there, ``users``: those whose jobs run or are pinned
    there, ``partitions`` the node's, of which ``user_exclusive`` keep a node to one user; the CPUs and
    memory of running opportunistic jobs, which a job that preempts them may have too; ``yielding``: the
    users whose jobs running there are all opportunistic, which such a job may tell to leave."""

    cpus: int
    cpus_free: int
    mem_mb: int
    mem_free_mb: int
    rows: dict[str, list[int]] = field(default_factory=dict)
    owner: str = ""
    users: set[str] = field(default_factory=set)
    partitions: tuple[str, ...] = ()
    user_exclusive: frozenset[str] = frozenset()
    preemptible_cpus: int = 0
    preemptible_mem_mb: int = 0
    yielding: frozenset[str] = frozenset()

    def other_user(self, needs: NodeNeeds) -> str | None:
        """Another user whose jobs keep the job off the node, and who does not yield it to the job."""
        in_the_way = users_in_the_way(
            needs.user, needs.partitions, self.owner, self.users, self.partitions, self.user_exclusive
        )
        return next(iter(not_yielding(in_the_way, self.yielding if needs.preempts else frozenset())), None)

    def _row(self, needs: NodeNeeds) -> tuple[list[int], int] | None:
        """The first row of the needs' sharing partitions with their CPUs free: its partition's rows and
        its index."""
        for p in needs.shares_in:
            for i, free in enumerate(self.rows.get(p, ())):
                if free >= needs.cpus:
                    return self.rows[p], i
        return None

    def cpus_left(self, needs: NodeNeeds) -> int:
        """The most CPUs a job of ``needs`` finds free: free ones (with those it preempts), or free in one
        row it may share."""
        shared = [free for p in needs.shares_in for free in self.rows.get(p, ())]
        return max([self.cpus_free + (self.preemptible_cpus if needs.preempts else 0), *shared])

    def mem_left(self, needs: NodeNeeds) -> int:
        """The memory (MB) a job of ``needs`` finds free, with that of the jobs it preempts."""
        return self.mem_free_mb + (self.preemptible_mem_mb if needs.preempts else 0)

    def fits(self, needs: NodeNeeds) -> bool:
        if self.other_user(needs):
            return False
        if self.cpus and needs.cpus > self.cpus_left(needs):
            return False
        if self.mem_mb and needs.mem_mb > self.mem_left(needs):
            return False
        return not (needs.whole_memory and self.mem_mb and self.mem_left(needs) < self.mem_mb)

    def take(self, needs: NodeNeeds) -> None:
        # Slurm gives a job free CPUs first: those are free in every row, so a job that shares none
        # takes them from every row; a sharing job placed beside others takes them from its row only
        if needs.preempts:
            # what free CPUs and memory lack comes of the opportunistic jobs Slurm requeues for it
            self.preemptible_cpus = max(0, self.preemptible_cpus - max(0, needs.cpus - self.cpus_free))
            mem = self.mem_mb if needs.whole_memory else needs.mem_mb
            self.preemptible_mem_mb = max(0, self.preemptible_mem_mb - max(0, mem - self.mem_free_mb))
        row = self._row(needs)
        if needs.cpus <= self.cpus_free or row is None:
            self.cpus_free = max(0, self.cpus_free - needs.cpus)
            if row is None:
                for frees in self.rows.values():
                    frees[:] = [max(0, f - needs.cpus) for f in frees]
        if row is not None:
            frees, i = row
            frees[i] = max(0, frees[i] - needs.cpus)
        self.mem_free_mb = 0 if needs.whole_memory else max(0, self.mem_free_mb - needs.mem_mb)
        if needs.user:
            self.users.add(needs.user)
            self.yielding -= {needs.user}
            if kept_to_one_user(needs.partitions, self.partitions, self.user_exclusive):
                self.owner = needs.user
