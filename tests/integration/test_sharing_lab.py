"""GPU sharing on the real Slurm lab: slices land on the GPU the binpack chose (``shard:gN:k``) and see
their limit; a co-located opportunistic slice is requeued when a guaranteed slice needs its memory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hivebatch.cells import CellAllocator, parse_cluster_config
from hivebatch.config import read_yaml
from hivebatch.sharing import (
    SharingLedger,
    SliceDecision,
    job_environment,
    parse_sharing_config,
    sbatch_export_arg,
)

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
GiB = 1024

PROBE = """#!/bin/bash
echo "host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES shards=${SLURM_SHARDS_ON_NODE:-} mem=${HIVEBATCH_GPU_MEM_MIB:-} frac=${HIVEBATCH_GPU_MEM_FRACTION:-}"
sleep 300
"""


def _ledger(slurm_lab: Any, sharing: dict | None = None) -> tuple[SharingLedger, CellAllocator]:
    """A ledger over the lab's own cluster config, with every GPU Slurm already uses kept out."""
    data = read_yaml(PROJECT / "etc" / "hivebatch.example.yaml")
    data["sharing"] = sharing or {}
    spec = parse_cluster_config(data)
    alloc = CellAllocator(spec)
    for node in slurm_lab.backend().list_nodes():
        busy = sorted(set(node.gpus_used) | set(node.gpus_shared))
        if node.bad:
            alloc.set_node_bad(node.name)
        elif busy and spec.has_node(node.name):
            alloc.occupy_foreign(f"busy-{node.name}", node.name, busy)
    cfg = parse_sharing_config(data, {n.name for n in spec.nodes}, set(spec.vcs))
    return SharingLedger(alloc, spec, cfg), alloc


def _submit_slice(
    slurm_lab: Any, lab_jobs: list[int], user: str, name: str, d: SliceDecision, qos: str
) -> int:
    env = job_environment(d.mem_mib, d.capacity_mib)
    out = slurm_lab.jobs_dir / f"{name}-%j.out"
    args = [
        "--hold",
        "-J",
        name,
        "--qos",
        qos,
        "--chdir",
        str(slurm_lab.jobs_dir),
        "-o",
        str(out),
        "--open-mode=append",
        sbatch_export_arg(env),
    ]
    jid = slurm_lab.backend(user).submit(PROBE, args)
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    return jid


def _start(slurm_lab: Any, jid: int, d: SliceDecision) -> None:
    op = slurm_lab.backend(slurm_lab.operator)
    assert d.node is not None and d.gres is not None
    op.update_pending(jid, nodelist=[d.node], num_nodes=1, gres=d.gres)
    op.release(jid)


def test_slices_run_on_the_binpacked_gpu_and_see_their_limit(slurm_lab: Any, lab_jobs: list[int]) -> None:
    led, _ = _ledger(slurm_lab)
    sizes = {"shA": 8 * GiB, "shB": 8 * GiB, "shC": 12 * GiB, "shD": 8 * GiB}
    decisions = {name: led.place(name, "cv", mem, 0) for name, mem in sizes.items()}
    assert {d.result for d in decisions.values()} == {"placed"}
    first = (decisions["shA"].node, decisions["shA"].gpu)
    # 8 + 8 + 12 = 28G binpack onto one GPU; the next 8G no longer fits its 4G and opens another
    assert [(decisions[n].node, decisions[n].gpu) for n in ("shB", "shC")] == [first, first]
    assert (decisions["shD"].node, decisions["shD"].gpu) != first

    ids = {}
    for name, d in decisions.items():
        ids[name] = _submit_slice(slurm_lab, lab_jobs, "alice", name, d, "normal")
        _start(slurm_lab, ids[name], d)
    for name, d in decisions.items():
        job = slurm_lab.wait_for(ids[name], {"RUNNING"})
        assert job.nodes == [d.node]
        assert job.shards == {d.node: {d.gpu: d.shards}}
        text = slurm_lab.wait_for_file(slurm_lab.jobs_dir / f"{name}-{ids[name]}.out", "cvd=")
        frac = f"{d.mem_mib / d.capacity_mib:.3f}"
        assert f"host={d.node} cvd={d.gpu} shards={d.shards} mem={d.mem_mib} frac={frac}" in text
    # Slurm's view of the node agrees: the GPU carries shards, and is not handed out whole
    node = next(n for n in slurm_lab.backend().list_nodes() if n.name == first[0])
    assert first[1] in node.gpus_shared


def test_colocated_opportunistic_slice_is_requeued_for_a_guaranteed_slice(
    slurm_lab: Any, lab_jobs: list[int]
) -> None:
    led, _ = _ledger(slurm_lab, {"colocate": {"vcs": ["sys"], "headroom_mib": "2G"}})
    g1 = led.place("coG1", "sys", 8 * GiB, 0)
    opp = led.place("coOpp", "nlp", 20 * GiB, -1)  # 32 - 8 - 2 = 22G idle: the opportunistic slice fits
    assert g1.result == opp.result == "placed"
    assert (opp.node, opp.gpu) == (g1.node, g1.gpu) and opp.colocated

    jg1 = _submit_slice(slurm_lab, lab_jobs, "carol", "coG1", g1, "normal")
    jopp = _submit_slice(slurm_lab, lab_jobs, "bob", "coOpp", opp, "opportunistic")
    _start(slurm_lab, jg1, g1)
    _start(slurm_lab, jopp, opp)
    slurm_lab.wait_for(jg1, {"RUNNING"})
    assert slurm_lab.wait_for(jopp, {"RUNNING"}).shards == {opp.node: {opp.gpu: 20}}

    # a guaranteed 12G slice of sys: 8 + 20 + 12 > 32, so the opportunistic slice must yield
    g2 = led.place("coG2", "sys", 12 * GiB, 0)
    assert g2.result == "placed" and (g2.node, g2.gpu) == (g1.node, g1.gpu)
    assert g2.preempted == ["coOpp"]
    jg2 = _submit_slice(slurm_lab, lab_jobs, "carol", "coG2", g2, "normal")
    # the controller's order: requeue (held) what the ledger preempted, then start the new slice
    op = slurm_lab.backend(slurm_lab.operator)
    op.requeue_hold(jopp)
    requeued = slurm_lab.wait_for(jopp, {"PENDING"}, held=True)
    assert requeued.reason == "job_requeued_in_held_state"
    _start(slurm_lab, jg2, g2)
    job = slurm_lab.wait_for(jg2, {"RUNNING"}, timeout_s=45)
    assert job.shards == {g2.node: {g2.gpu: 12}}
    slurm_lab.wait_for(jg1, {"RUNNING"})
    # Slurm enforces the same arithmetic: released again, the 20G slice cannot fit the 12G left
    op.release(jopp)
    time.sleep(4)
    assert slurm_lab.backend().list_jobs([jopp])[0].state == "PENDING"
    assert led.slice_of("coOpp") is None
    led.check_invariants()
