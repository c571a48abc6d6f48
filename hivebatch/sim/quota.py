"""Quota-mode sharing: each VC limited only by a GPU count on one shared pool (Slurm's GrpTRES).

There is no affinity guarantee: a job takes whichever free GPUs Slurm's ``select/cons_tres`` gives
a job submitted with ``--gpus=N`` (a per-job GPU count). The rules below are what Slurm 22.05.8
did on the lab (recorded in tests/fixtures/slurm/cons_tres_gpu_placement.txt), read alongside its
source (src/plugins/select/cons_tres/job_test.c, ``_eval_nodes`` and ``choose_nodes``):

* Nodes of lower slurm.conf Weight are used first; equal weights keep configuration order.
* A job that fits on one node goes to the first node (in that order) that holds it. ``_eval_nodes``
  takes the "best fit" node by available CPUs, but for a GPU job every node offers the same CPU
  count, so the first one wins: single-GPU jobs pack onto the first busy nodes, they do not seek
  the node with the fewest free GPUs (free 2,4,1,4: a one-GPU job went to the node with 2).
* A job no node holds alone takes the nodes with the most free GPUs, as few as it needs
  (``choose_nodes`` drops low-resource nodes and retries). Slurm splits the GPUs over those nodes
  by rules of its GRES layer that this model does not follow (8 GPUs on nodes with 6 and 7 free
  came out 5 + 3); here the nodes are filled in configuration order.
* GrpTRES=gres/gpu=N per account: a job that would take its account over N waits (AssocGrpGRES).

The shape the policy asked for is not honoured, which is the point: a spread placement then runs
slower through the performance model (see ``runtime.py``). This is a model of Slurm's accounting
limits for comparison, not a cell allocator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PoolDecision:
    result: str  # "placed" | "waiting" | "rejected"
    placement: dict[str, list[int]] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None


@dataclass
class _PoolJob:
    vc: str
    placement: dict[str, list[int]]
    gpus: int


class QuotaPool:
    """Duck-types the parts of ``CellAllocator`` that ``schedule_round`` and the simulator use."""

    def __init__(
        self, nodes: list[Any], quota: dict[str, int], weights: dict[str, int] | None = None
    ) -> None:
        # node name -> (gpu type, free GPU indices), in configuration order (Slurm's node table order)
        self._order = [n.name for n in nodes]
        self._weight = dict(weights or {})  # slurm.conf Weight per node; 1 (Slurm's default) if absent
        self._free: dict[str, set[int]] = {n.name: set(n.gpu_indices) for n in nodes}
        self._type: dict[str, str] = {n.name: n.gpu_type for n in nodes}
        self._bad: set[str] = set()
        self._quota = dict(quota)
        self._used: dict[str, int] = dict.fromkeys(quota, 0)
        self._jobs: dict[str, _PoolJob] = {}

    def _choose(self, gpus: int, gpu_type: str | None) -> dict[str, list[int]] | None:
        usable = [
            name
            for name in self._order
            if self._free[name]
            and name not in self._bad
            and (gpu_type is None or self._type[name] == gpu_type)
        ]
        if sum(len(self._free[n]) for n in usable) < gpus:
            return None
        rank = {name: i for i, name in enumerate(self._order)}
        holds = [n for n in usable if len(self._free[n]) >= gpus]
        if holds:
            best = min(holds, key=lambda n: (self._weight.get(n, 1), rank[n]))
            return {best: sorted(self._free[best])[:gpus]}
        chosen: list[str] = []
        got = 0
        for name in sorted(usable, key=lambda n: (self._weight.get(n, 1), -len(self._free[n]), rank[n])):
            chosen.append(name)
            got += len(self._free[name])
            if got >= gpus:
                break
        placement: dict[str, list[int]] = {}
        need = gpus
        for name in sorted(chosen, key=rank.__getitem__):
            take = sorted(self._free[name])[: min(need, len(self._free[name]))]
            placement[name] = take
            need -= len(take)
        return placement

    def try_allocate(self, req: Any) -> PoolDecision:
        vc = req.vc
        if vc not in self._quota:
            return PoolDecision("rejected", error=f"unknown VC {vc}")
        if req.gpus > self._quota[vc]:
            return PoolDecision(
                "rejected", error=f"{req.gpus} GPUs exceed VC {vc}'s limit of {self._quota[vc]} GPUs"
            )
        if self._used[vc] + req.gpus > self._quota[vc]:
            return PoolDecision(
                "waiting",
                reason=f"VC {vc} GPU limit reached ({self._used[vc]} of {self._quota[vc]} GPUs in use)",
            )
        placement = self._choose(req.gpus, req.gpu_type)
        if placement is None:
            return PoolDecision("waiting", reason="not enough free GPUs in the shared pool")
        return PoolDecision("placed", placement=placement)

    def allocate(self, req: Any) -> PoolDecision:
        d = self.try_allocate(req)
        if d.result == "placed":
            for name, idx in d.placement.items():
                self._free[name].difference_update(idx)
            self._used[req.vc] += req.gpus
            self._jobs[str(req.job_id)] = _PoolJob(req.vc, d.placement, req.gpus)
        return d

    def release(self, job_id: str) -> None:
        job = self._jobs.pop(str(job_id))
        for name, idx in job.placement.items():
            self._free[name].update(idx)
        self._used[job.vc] -= job.gpus

    def set_node_bad(self, node: str) -> None:
        self._bad.add(node)

    def set_node_healthy(self, node: str) -> None:
        self._bad.discard(node)

    def free_gpus(self) -> int:
        return sum(len(f) for n, f in self._free.items() if n not in self._bad)
