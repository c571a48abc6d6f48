"""Quota-mode sharing: each VC limited only by a GPU count on one shared pool (Slurm's GrpTRES).

There is no affinity guarantee: a job takes whichever free GPUs Slurm's ``select/cons_tres`` would
give it. The rules are what Slurm 22.05.8 did on the lab (recorded in
tests/fixtures/slurm/cons_tres_gpu_placement.txt), read alongside its source
(src/plugins/select/cons_tres/job_test.c: ``_eval_nodes``, ``choose_nodes``). Nodes of lower
slurm.conf Weight come first; equal weights keep configuration order.

* ``-N n --gres=gpu:g`` (a request with a node count, the form hivebatch submits and a trace job's
  tightest shape): only nodes with g free GPUs qualify, and the job waits until n of them exist.
  One node: the qualifying node with the fewest free GPUs (best fit; free 2,1,6,7 and one GPU
  asked: the node with 1). Several nodes: ``_eval_nodes``' runs of consecutive qualifying nodes,
  the first run with enough nodes, replaced by one with fewer free GPUs (tightest); nodes are
  taken in order within it.
* ``--gpus=N`` (no node count): a job that fits on one node goes to the first node (in order)
  that holds it; a job no node holds alone takes the nodes with the most free GPUs, as few as it
  needs (``choose_nodes`` drops low-resource nodes and retries), filled in configuration order
  (Slurm's GRES layer split 8 GPUs over nodes with 6 and 7 free as 5 + 3; this model gives 6 + 2).
* GrpTRES=gres/gpu=N per account: a job that would take its account over N waits (AssocGrpGRES).

With a node count the shape is the one asked for; without one a spread placement runs slower
through the performance model (see ``runtime.py``). This is a model of Slurm's accounting limits
for comparison, not a cell allocator.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PoolDecision:
    result: str  # "placed" | "waiting" | "rejected"
    placement: dict[str, list[int]] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    leaving_until: float | None = None  # a quota pool gives no notice: always None


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

    def _usable(self, per_node: int, gpu_type: str | None) -> list[str]:
        """Nodes that can take ``per_node`` GPUs, lowest Weight first, then configuration order."""
        rank = {name: i for i, name in enumerate(self._order)}
        return sorted(
            (
                name
                for name in self._order
                if len(self._free[name]) >= per_node
                and name not in self._bad
                and (gpu_type is None or self._type[name] == gpu_type)
            ),
            key=lambda n: (self._weight.get(n, 1), rank[n]),
        )

    def _take(self, nodes: list[str], counts: list[int]) -> dict[str, list[int]]:
        return {n: sorted(self._free[n])[:k] for n, k in zip(nodes, counts, strict=True) if k}

    def _choose_per_node(
        self, nodes: int, per_node: int, gpu_type: str | None
    ) -> dict[str, list[int]] | None:
        usable = self._usable(per_node, gpu_type)
        if len(usable) < nodes:
            return None
        if nodes == 1:
            best = min(usable, key=lambda n: (self._weight.get(n, 1), len(self._free[n])))  # stable: order
            return self._take([best], [per_node])
        # runs of consecutive qualifying nodes (configuration order) with equal Weight
        ok = set(usable)
        runs: list[list[str]] = []
        prev: int | None = None
        for name in self._order:
            w = self._weight.get(name, 1)
            if name not in ok:
                prev = None
                continue
            if prev is None or w != prev:
                runs.append([])
            runs[-1].append(name)
            prev = w
        chosen: list[str] = []
        while len(chosen) < nodes and runs:
            need = nodes - len(chosen)

            def key(run: list[str], need: int = need) -> tuple[int, int, int]:
                size = sum(len(self._free[n]) for n in run)
                enough = len(run) >= need
                # lowest Weight; then a run with enough nodes, the tightest; else the biggest
                return (self._weight.get(run[0], 1), 0 if enough else 1, size if enough else -size)

            best_run = min(runs, key=key)
            runs.remove(best_run)
            chosen += best_run[:need]
        return self._take(chosen, [per_node] * len(chosen))

    def _choose(self, gpus: int, gpu_type: str | None) -> dict[str, list[int]] | None:
        usable = self._usable(1, gpu_type)
        if sum(len(self._free[n]) for n in usable) < gpus:
            return None
        holds = [n for n in usable if len(self._free[n]) >= gpus]
        if holds:
            return self._take([holds[0]], [gpus])
        chosen: list[str] = []
        got = 0
        for name in sorted(usable, key=lambda n: (self._weight.get(n, 1), -len(self._free[n]))):
            chosen.append(name)
            got += len(self._free[name])
            if got >= gpus:
                break
        chosen.sort(key=usable.index)
        counts = []
        need = gpus
        for name in chosen:
            counts.append(min(need, len(self._free[name])))
            need -= counts[-1]
        return self._take(chosen, counts)

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
        nodes = getattr(req, "nodes", None)
        if nodes and req.gpus % nodes == 0:
            placement = self._choose_per_node(nodes, req.gpus // nodes, req.gpu_type)
            where = f"{nodes} node(s) with {req.gpus // nodes} free GPUs each"
        else:
            placement = self._choose(req.gpus, req.gpu_type)
            where = "enough free GPUs in the shared pool"
        if placement is None:
            return PoolDecision("waiting", reason=f"not {where}")
        return PoolDecision("placed", placement=placement)

    def allocate(self, req: Any) -> PoolDecision:
        d = self.try_allocate(req)
        if d.result == "placed":
            for name, idx in d.placement.items():
                self._free[name].difference_update(idx)
            self._used[req.vc] += req.gpus
            self._jobs[str(req.job_id)] = _PoolJob(req.vc, d.placement, req.gpus)
        return d

    def adopt(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> PoolDecision:
        """Take exactly ``placement`` for a job (what-ifs of the backfill reservations)."""
        gpus = sum(len(g) for g in placement.values())
        if any(not set(g) <= self._free.get(n, set()) for n, g in placement.items()):
            return PoolDecision("rejected", error="those GPUs are not free")
        if self._used.get(vc, 0) + gpus > self._quota.get(vc, 0):
            return PoolDecision("rejected", error=f"VC {vc} GPU limit reached")
        for name, idx in placement.items():
            self._free[name].difference_update(idx)
        self._used[vc] += gpus
        self._jobs[str(job_id)] = _PoolJob(vc, {n: list(g) for n, g in placement.items()}, gpus)
        return PoolDecision("placed", placement=placement)

    def fork(self) -> QuotaPool:
        """A separate copy (backfill reservations try what-ifs on it)."""
        return copy.deepcopy(self)

    def jobs(self) -> dict[str, Any]:
        """The jobs holding GPUs, by id."""
        return dict(self._jobs)

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
