"""What a job needs of each node besides GPUs, and what a node has left of it during one round.

The cells choose GPUs; Slurm starts a pinned job only where its CPUs and memory fit too. Each node is
checked against what Slurm reports free, but jobs placed in the same round, and pins Slurm has not
started yet, take from the same nodes without Slurm counting them: on the lab four ``-c 16`` GPU jobs
were pinned to one 16-CPU node in one cycle, and three waited while three nodes stood idle. The
scheduler keeps a ``NodeRoom`` per node for the round and takes each placement's needs from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeNeeds:
    """Per node: CPUs and MB of memory, or all of its memory (``--mem=0``)."""

    cpus: int = 0
    mem_mb: int = 0
    whole_memory: bool = False


@dataclass
class NodeRoom:
    """A node's CPUs and memory, all and still free (0 in ``cpus`` or ``mem_mb``: not reported, no check)."""

    cpus: int
    cpus_free: int
    mem_mb: int
    mem_free_mb: int

    def fits(self, needs: NodeNeeds) -> bool:
        if self.cpus and needs.cpus > self.cpus_free:
            return False
        if self.mem_mb and needs.mem_mb > self.mem_free_mb:
            return False
        return not (needs.whole_memory and self.mem_mb and self.mem_free_mb < self.mem_mb)

    def take(self, needs: NodeNeeds) -> None:
        self.cpus_free = max(0, self.cpus_free - needs.cpus)
        self.mem_free_mb = 0 if needs.whole_memory else max(0, self.mem_free_mb - needs.mem_mb)
