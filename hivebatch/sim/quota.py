"""Quota-mode sharing: each VC limited only by a GPU count on one shared pool (Slurm's GrpTRES).

There is no affinity guarantee: a job takes any free GPUs. A job that fits on one node goes to the
node with the fewest free GPUs that still holds it (Slurm packs); otherwise it spreads over the
nodes with the most free GPUs. The shape the policy asked for is not honoured, which is the point:
the spread placement then runs slower through the performance model (see ``runtime.py``).
This is a model of Slurm's accounting limits for comparison, not a cell allocator.
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

    def __init__(self, nodes: list[Any], quota: dict[str, int]) -> None:
        # node name -> (gpu type, free GPU indices); dicts keep config order for ties
        self._free: dict[str, set[int]] = {n.name: set(n.gpu_indices) for n in nodes}
        self._type: dict[str, str] = {n.name: n.gpu_type for n in nodes}
        self._bad: set[str] = set()
        self._quota = dict(quota)
        self._used: dict[str, int] = dict.fromkeys(quota, 0)
        self._jobs: dict[str, _PoolJob] = {}

    def _choose(self, gpus: int, gpu_type: str | None) -> dict[str, list[int]] | None:
        cands = [
            (name, free)
            for name, free in self._free.items()
            if free and name not in self._bad and (gpu_type is None or self._type[name] == gpu_type)
        ]
        fitting = [(len(free), i) for i, (_, free) in enumerate(cands) if len(free) >= gpus]
        if fitting:
            _, i = min(fitting)
            name, free = cands[i]
            return {name: sorted(free)[:gpus]}
        if sum(len(f) for _, f in cands) < gpus:
            return None
        placement: dict[str, list[int]] = {}
        need = gpus
        for name, free in sorted(cands, key=lambda c: -len(c[1])):
            take = sorted(free)[: min(need, len(free))]
            placement[name] = take
            need -= len(take)
            if need == 0:
                break
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
