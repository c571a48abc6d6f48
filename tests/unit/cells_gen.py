"""Random feasible multi-chain cluster configs and operation sequences for the cell core's property tests.

Shared by tests/unit/test_cells_properties.py (short, in CI) and bench/bench_cells.py (the soak).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hivebatch.cells import CellAllocator, Request, parse_cluster_config
from hivebatch.cells.config import InfeasibleConfigError, check_feasibility
from hivebatch.errors import ConfigError


def random_config(rng: random.Random, max_nodes: int = 12) -> dict[str, Any]:
    """1-3 chains; each: leaf, 0-2 levels below the node, the node, 0-1 levels above; VCs fill it."""
    cell_types: dict[str, Any] = {}
    physical: list[dict[str, Any]] = []
    node_no = 0
    chains: list[list[tuple[str, int]]] = []  # per chain: (type, nodes per cell) for levels >= node
    for c in range(rng.randint(1, 3)):
        leaf = f"G{c}"
        cell_types[leaf] = {}
        prev = leaf
        for k in range(rng.randint(0, 2)):
            name = f"G{c}-L{k + 2}"
            cell_types[name] = {"child": prev, "count": rng.randint(2, 3)}
            prev = name
        node = f"G{c}-NODE"
        cell_types[node] = {
            "child": prev,
            "count": rng.randint(1, 3) if prev != leaf else rng.randint(2, 4),
            "node": True,
        }
        levels = [(node, 1)]
        if rng.random() < 0.5:
            rack = f"G{c}-RACK"
            cell_types[rack] = {"child": node, "count": 2}
            levels.append((rack, 2))
        chains.append(levels)
    budget = max_nodes
    for levels in chains:
        for _ in range(rng.randint(1, 3)):
            tname, span = rng.choice(levels)
            if budget < span:
                break
            names = [f"n{node_no + i + 1}" for i in range(span)]
            node_no += span
            budget -= span
            physical.append({"type": tname, "nodes": names})
    cfg: dict[str, Any] = {
        "cluster": {"cell_types": cell_types, "physical_cells": physical},
        "virtual_clusters": {},
    }
    used_chains = {t["type"].split("-")[0] for t in physical}
    all_types = [t for t in cell_types if t.split("-")[0] in used_chains]
    n_vcs = rng.randint(1, 4)
    vcs: dict[str, dict[str, int]] = {f"v{i}": {} for i in range(n_vcs)}
    for _ in range(rng.randint(2, 14)):
        v = f"v{rng.randrange(n_vcs)}"
        t = rng.choice(all_types)
        vcs[v][t] = vcs[v].get(t, 0) + 1
        cfg["virtual_clusters"] = {k: {"cells": dict(x)} for k, x in vcs.items()}
        try:
            check_feasibility(parse_cluster_config(cfg, check_feasible=False))
        except InfeasibleConfigError:
            vcs[v][t] -= 1
            if not vcs[v][t]:
                del vcs[v][t]
    cfg["virtual_clusters"] = {k: {"cells": dict(x)} for k, x in vcs.items()}
    return cfg


def legal_request(alloc: CellAllocator, rng: random.Random, job_id: str) -> tuple[Request, str, int] | None:
    """A guaranteed request the VC can hold in one of its unbound cells (so Theorem 1 applies)."""
    spec = alloc.spec
    choices = []
    for vname, v in alloc.vcs.items():
        for cname, ch in spec.chains.items():
            for lv in range(1, ch.top_level + 1):
                if v.unbound[cname][lv] > 0:
                    choices.append((vname, cname, lv))
    if not choices:
        return None
    vname, cname, lv = rng.choice(choices)
    ch = spec.chains[cname]
    ct = spec.cell_types[ch.type_at(lv)]
    prio = rng.randint(0, 3)
    if lv > ch.node_level and rng.random() < 0.6:
        n = rng.randint(2, ct.nodes)
        g = rng.randint(1, ch.gpus_per_node)
        return Request(job_id=job_id, vc=vname, gpus=n * g, nodes=n, gpu_type=cname, priority=prio), cname, lv
    g = rng.randint(1, min(ct.gpus, ch.gpus_per_node))
    return Request(job_id=job_id, vc=vname, gpus=g, nodes=1, gpu_type=cname, priority=prio), cname, lv


def any_request(alloc: CellAllocator, rng: random.Random, job_id: str) -> Request:
    spec = alloc.spec
    cname = rng.choice(list(spec.chains))
    gpn = spec.chains[cname].gpus_per_node
    n = rng.choice([1, 1, 1, 2, 3])
    g = rng.randint(1, gpn)
    return Request(
        job_id=job_id,
        vc=rng.choice(list(alloc.vcs)),
        gpus=n * g,
        nodes=n if (n > 1 or rng.random() < 0.5) else None,
        gpu_type=cname if rng.random() < 0.7 else None,
        priority=rng.choice([-1, -1, 0, 0, 1, 2]),
    )


def assert_consistent(alloc: CellAllocator) -> None:
    """The invariants every state must keep."""
    alloc.check_invariants()
    owners: Counter[tuple[str, int]] = Counter()
    for job in alloc.jobs().values():
        for node, idx in job.placement.items():
            for i in idx:
                owners[(node, i)] += 1
        if not job.opportunistic:
            # gang placement with the same GPU indices on every node
            sets = {tuple(ix) for ix in job.placement.values()}
            assert len(sets) == 1, f"{job.job_id} not symmetric: {job.placement}"
    assert all(k == 1 for k in owners.values()), "a GPU is used by two jobs"
    # never a VC above its cells: GPUs of its guaranteed jobs <= GPUs of its cells
    used: Counter[str] = Counter()
    for job in alloc.jobs().values():
        if not job.opportunistic:
            used[job.vc] += job.gpus
    for v in alloc.vcs:
        assert used[v] <= alloc.spec.vc_gpus(v), f"VC {v} above its cells"


def check_config_or_skip(cfg: dict[str, Any]) -> bool:
    try:
        parse_cluster_config(cfg)
    except ConfigError:
        return False
    return True


def preempting_request(alloc: CellAllocator, rng: random.Random, job_id: str) -> Request | None:
    """A request of a VC whose guaranteed jobs all have lower priority: once they are preempted, the
    VC is empty, so the request must be placed whenever one of its cells can hold it."""
    vname = rng.choice(list(alloc.vcs))
    spec = alloc.spec
    top = max(
        (j.priority for j in alloc.jobs().values() if j.vc == vname and not j.opportunistic), default=-1
    )
    sizes = [
        (
            spec.cell_types[t].chain,
            min(spec.cell_types[t].gpus, spec.chains[spec.cell_types[t].chain].gpus_per_node),
        )
        for t in spec.vcs[vname].cells
    ]
    if not sizes:
        return None
    chain, most = rng.choice(sizes)
    return Request(
        job_id=job_id, vc=vname, gpus=rng.randint(1, most), nodes=1, gpu_type=chain, priority=top + 1
    )
