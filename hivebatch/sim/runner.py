"""Running a workload under several policies and sharing modes, with the private-cluster baseline.

The private baseline of a VC is its guaranteed jobs alone on exactly its own cells (cells mode, no
other VC, no opportunistic jobs). It is computed once per policy and compared with both shared modes:
excess queuing delay = shared mean queue − private mean queue (positive = worse than private).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hivebatch.sim.engine import BadNode, Simulation
from hivebatch.sim.metrics import RunSummary, summarize, vc_queue_means
from hivebatch.sim.runtime import RuntimeModel
from hivebatch.sim.workload import SimJob

ProgressFactory = Callable[[str, int], Callable[[int, int], None] | None]


@dataclass
class Experiment:
    spec: Any
    jobs: list[SimJob]
    runtime: RuntimeModel
    platform: Any
    bad_nodes: list[BadNode] | None = None
    opportunistic: bool = True
    private_baseline: bool = True


def private_queues(exp: Experiment, policy: str, progress: ProgressFactory | None = None) -> dict[str, float]:
    """VC -> mean queuing delay of its guaranteed jobs alone on its own cells."""
    by_vc: dict[str, list[SimJob]] = {}
    for j in exp.jobs:
        if not j.opportunistic:
            by_vc.setdefault(j.vc, []).append(j)
    out: dict[str, float] = {}
    for vc, jobs in sorted(by_vc.items()):
        cb = progress(f"{policy} private {vc}", len(jobs)) if progress else None
        run = Simulation(
            exp.spec, jobs, policy, "cells", exp.runtime, exp.platform, opportunistic=False, progress=cb
        ).run()
        means = vc_queue_means(run.records)
        if vc in means:
            out[vc] = means[vc][1]
    return out


def run_all(
    exp: Experiment, policies: list[str], modes: list[str], progress: ProgressFactory | None = None
) -> list[RunSummary]:
    results: list[RunSummary] = []
    for policy in policies:
        private = private_queues(exp, policy, progress) if exp.private_baseline else None
        for mode in modes:
            cb = progress(f"{policy} {mode}", len(exp.jobs)) if progress else None
            sim = Simulation(
                exp.spec,
                exp.jobs,
                policy,
                mode,
                exp.runtime,
                exp.platform,
                bad_nodes=exp.bad_nodes,
                opportunistic=exp.opportunistic,
                progress=cb,
            )
            results.append(summarize(sim.run(), private))
    return results
