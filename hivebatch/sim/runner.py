"""Running a workload under several policies and sharing modes, with the private-cluster baseline.

The private baseline of a VC is its guaranteed jobs alone on a private cluster of its size, run the
same way as the shared run (no other VC, no opportunistic jobs): in cells mode on exactly its own
cells; in quota mode on a pool of its own nodes only (plain Slurm on a cluster of the VC's size),
so the excess measures sharing and not the difference between the two placement rules. When a
VC's GPUs are not whole nodes of a uniform cluster, the quota baseline falls back to its cells.
Excess queuing delay = shared mean queue − private mean queue (positive = worse than private).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hivebatch.reservation import DEFAULT_STARVE_AFTER_S
from hivebatch.sim.engine import BadNode, Simulation
from hivebatch.sim.metrics import RunSummary, summarize, vc_queue_means
from hivebatch.sim.notice import SimNotice
from hivebatch.sim.resize import Resizing
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
    backfill: bool = False  # backfill reservations for each VC's head (hivebatch.reservation)
    fairshare_half_life_s: float | None = None  # per-user fairshare inside a VC and class; None: off
    starve_after_s: float = DEFAULT_STARVE_AFTER_S  # with backfill: a job waiting this long is the head
    resizing: Resizing | None = None  # running model jobs grow and shrink (hivebatch.sim.resize); None: off


def private_nodes(spec: Any, vc: str) -> list[str] | None:
    """As many nodes as the VC's GPUs fill, if the cluster's nodes are uniform and they fill whole nodes."""
    sizes = {(n.gpu_type, len(n.gpu_indices)) for n in spec.nodes}
    if len(sizes) != 1:
        return None
    per_node = next(iter(sizes))[1]
    gpus = spec.vc_gpus(vc)
    if per_node <= 0 or gpus % per_node:
        return None
    return [n.name for n in spec.nodes[: gpus // per_node]]


def private_queues(
    exp: Experiment,
    policy: str,
    progress: ProgressFactory | None = None,
    mode: str = "cells",
    *,
    class_priority: bool = False,
    notice: SimNotice | None = None,
    cycle_s: float | None = None,
    cycle_phase_s: float = 0.0,
    start_latency_s: float = 0.0,
) -> dict[str, float]:
    """VC -> mean queuing delay of its guaranteed jobs alone on a private cluster of its size.

    ``class_priority``, ``notice``, ``cycle_s`` (and its phase) and ``start_latency_s``: the private cluster runs the scheduler of the run it is
    the baseline of (see ``Simulation``): it ranks the VC's own jobs by class, preempts within the VC with
    notice and decides at the same cycles, so the excess wait over it is what sharing costs, not what
    the scheduler does on any cluster.
    """
    by_vc: dict[str, list[SimJob]] = {}
    for j in exp.jobs:
        if not j.opportunistic:
            by_vc.setdefault(j.vc, []).append(j)
    out: dict[str, float] = {}
    for vc, jobs in sorted(by_vc.items()):
        cb = progress(f"{policy} private {vc}", len(jobs)) if progress else None
        own = private_nodes(exp.spec, vc) if mode == "quota" else None
        run = Simulation(
            exp.spec,
            jobs,
            policy,
            "quota" if own is not None else "cells",
            exp.runtime,
            exp.platform,
            opportunistic=False,
            progress=cb,
            pool_nodes=own,
            backfill=exp.backfill,
            fairshare_half_life_s=exp.fairshare_half_life_s,
            starve_after_s=exp.starve_after_s,
            class_priority=class_priority,
            notice=notice if own is None else None,
            cycle_s=cycle_s,
            cycle_phase_s=cycle_phase_s,
            start_latency_s=start_latency_s,
            resizing=exp.resizing,
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
        for mode in modes:
            private = private_queues(exp, policy, progress, mode) if exp.private_baseline else None
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
                backfill=exp.backfill,
                fairshare_half_life_s=exp.fairshare_half_life_s,
                starve_after_s=exp.starve_after_s,
                resizing=exp.resizing,
            )
            results.append(summarize(sim.run(), private))
    return results
