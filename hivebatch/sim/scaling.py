"""Sizing a cluster to a workload: VC sizes fitted so a trace sample replays at a realistic load.

A trace's VC sizes often describe the whole production cluster while the jobs are a sample of it
(Philly: 352 nodes, a sample that fills 3.9% of them), so nothing ever queues and sharing
anomalies cannot show. Fitting each VC to its own demand gives every VC the same offered load:

    load(VC) = Σ gpus·duration of its jobs / (VC GPUs · arrival span)

where the span runs from the first arrival to the last moment work is offered: the latest
arrival + duration of any job (the makespan of an unlimited cluster). Long jobs near the end of a
sample then count as spread over the time they really take, not squeezed into the arrival window.
A VC gets the fewest whole nodes that keep its load at or below the target, and never fewer than its
largest job needs (such a VC ends up below the target, and the summary says so).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from hivebatch.errors import HivebatchError
from hivebatch.sim.workload import SimJob


@dataclass(frozen=True)
class VcScaling:
    vc: str
    nodes_before: int
    nodes_after: int
    load_before: float
    load_after: float
    floor_by_largest_job: bool  # the largest job, not the demand, set the size


@dataclass(frozen=True)
class Scaling:
    target_load: float
    span_s: float
    vcs: tuple[VcScaling, ...]

    @property
    def load_before(self) -> float:
        return _weighted(self.vcs, before=True)

    @property
    def load_after(self) -> float:
        return _weighted(self.vcs, before=False)

    def vc_nodes(self) -> dict[str, int]:
        return {v.vc: v.nodes_after for v in self.vcs}

    def summary(self) -> str:
        nodes_b = sum(v.nodes_before for v in self.vcs)
        nodes_a = sum(v.nodes_after for v in self.vcs)
        head = (
            f"scaled: VC sizes fitted to each VC's demand for load {self.target_load:.0%} over the "
            f"{self.span_s / 86400:.1f} days from the first arrival to the last ideal completion: {nodes_b} -> {nodes_a} nodes, "
            f"mean load {self.load_before:.1%} -> {self.load_after:.1%}"
        )
        parts = [
            f"{v.vc} {v.nodes_before}->{v.nodes_after} ({v.load_after:.0%}"
            + (", held up by its largest job" if v.floor_by_largest_job else "")
            + ")"
            for v in self.vcs
        ]
        return head + "; " + ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "target_load": self.target_load,
            "span_s": round(self.span_s, 3),
            "load_before": round(self.load_before, 6),
            "load_after": round(self.load_after, 6),
            "vcs": {
                v.vc: {
                    "nodes_before": v.nodes_before,
                    "nodes_after": v.nodes_after,
                    "load_after": round(v.load_after, 6),
                    "largest_job_sets_size": v.floor_by_largest_job,
                }
                for v in self.vcs
            },
        }


def _weighted(vcs: Iterable[VcScaling], before: bool) -> float:
    gpus = sum(v.nodes_before if before else v.nodes_after for v in vcs)
    if not gpus:
        return 0.0
    return (
        sum((v.load_before * v.nodes_before) if before else (v.load_after * v.nodes_after) for v in vcs)
        / gpus
    )


def fit_vc_nodes(
    jobs: list[SimJob], vc_nodes: dict[str, int], target_load: float, gpus_per_node: int = 8
) -> Scaling:
    """Per-VC node counts that put each VC's demand at ``target_load`` (see the module docstring)."""
    if not 0 < target_load <= 1:
        raise HivebatchError(f"--target-load must be in (0, 1], e.g. 0.7 (got {target_load:g})")
    if not jobs:
        raise HivebatchError("no jobs to size the cluster for")
    timed = [j for j in jobs if j.duration_s is not None]
    if not timed:
        raise HivebatchError("--target-load needs trace jobs with durations (replay a --trace)")
    span = max(j.arrival + (j.duration_s or 0.0) for j in timed) - min(j.arrival for j in jobs)
    demand: dict[str, float] = dict.fromkeys(vc_nodes, 0.0)
    largest: dict[str, int] = dict.fromkeys(vc_nodes, 0)
    for j in jobs:
        if j.vc not in demand or j.duration_s is None:
            continue
        demand[j.vc] += j.gpus * j.duration_s
        largest[j.vc] = max(largest[j.vc], j.gpus)
    out = []
    for vc, before in vc_nodes.items():
        need = math.ceil(demand[vc] / (span * gpus_per_node * target_load) - 1e-9)
        floor = math.ceil(largest[vc] / gpus_per_node)
        after = max(need, floor, 1)
        out.append(
            VcScaling(
                vc=vc,
                nodes_before=before,
                nodes_after=after,
                load_before=demand[vc] / (span * gpus_per_node * before),
                load_after=demand[vc] / (span * gpus_per_node * after),
                floor_by_largest_job=floor > max(need, 1),
            )
        )
    return Scaling(target_load, span, tuple(out))
