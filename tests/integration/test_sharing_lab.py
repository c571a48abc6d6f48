"""GPU sharing on the real Slurm lab: slices land on the GPU the binpack chose (``shard:gN:k``) and see
their limit; a co-located opportunistic slice is requeued when a guaranteed slice needs its memory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

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


# --- end to end: a student's hsub --gpu-mem job, placed by `hivebatch controller run --once` -------------

E2E_SCRIPT = """#!/bin/bash
echo "slice host=$(hostname) cvd=${CUDA_VISIBLE_DEVICES:-none} mem=${HIVEBATCH_GPU_MEM_MIB:-} frac=${HIVEBATCH_GPU_MEM_FRACTION:-}"
sleep 240
"""


@dataclass
class Site:
    """A private hivebatch config (own SQLite ledger, co-location on for sys) the lab users can read."""

    dir: Path
    config: Path
    user_bin: Path

    def run(self, user: str | None, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        exe = str((self.user_bin if user else PROJECT / ".venv" / "bin") / tool)
        argv = ["runuser", "-u", user, "--", exe, *args] if user else [exe, *args]
        env = {**os.environ, "HIVEBATCH_CONFIG": str(self.config)}
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=self.dir, timeout=120, check=False
        )

    mine: set[int] = field(default_factory=set)

    def controller_once(self) -> None:
        proc = self.run(None, "hivebatch", "controller", "run", "--once", "-q", "--config", str(self.config))
        if proc.returncode != 0:
            # the controller sees the whole lab: a held hsub job of a test running at the same time may
            # end while this controller acts on it. Only failures about this test's own jobs count.
            failed = {int(x) for x in re.findall(r"(?:placement|requeue) of job (\d+)", proc.stderr)}
            assert failed and not failed & self.mine, proc.stderr

    def hsub(self, user: str, lab_jobs: list[int], *args: str) -> int:
        script = self.dir / "slice.sh"
        if not script.exists():
            script.write_text(E2E_SCRIPT)
            script.chmod(0o755)
        proc = self.run(user, "hsub", "--parsable", "-o", str(self.dir / "slice-%j.out"), *args, str(script))
        assert proc.returncode == 0, proc.stderr
        jid = int(proc.stdout.strip())
        lab_jobs.append(jid)
        self.mine.add(jid)
        return jid

    def hq_row(self, user: str, jid: int) -> dict[str, Any]:
        proc = self.run(user, "hq", "--json", "-t", "all", "-j", str(jid))
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)[0]

    def until_running(self, slurm_lab: Any, ids: list[int], timeout_s: float = 90) -> dict[int, Any]:
        deadline = time.monotonic() + timeout_s
        jobs: dict[int, Any] = {}
        while time.monotonic() < deadline:
            self.controller_once()
            jobs = {j.job_id: j for j in slurm_lab.backend().list_jobs(ids)}
            if all(jobs.get(i) is not None and jobs[i].state == "RUNNING" for i in ids):
                return jobs
            time.sleep(1)
        raise AssertionError(f"not all running: {[(i, getattr(jobs.get(i), 'state', None)) for i in ids]}")


@pytest.fixture(scope="module")
def site(slurm_lab: Any) -> Iterator[Site]:
    base = slurm_lab.jobs_dir / f"sharing-it-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    base.chmod(0o1777)
    (base / "db").mkdir(mode=0o755)
    data = read_yaml(PROJECT / "etc" / "hivebatch.example.yaml")
    data["database"] = {"url": f"sqlite:///{base / 'db' / 'hivebatch.db'}"}
    data["controller"] = {"lock_file": str(base / "controller.lock"), "interval_s": 1}
    data["sharing"] = {
        "enabled": True,
        # whole-GPU jobs that declare --gpu-mem may leave the rest of their GPUs to their VC's slices
        "allow_mixed_nodes": [n for cell in data["cluster"]["physical_cells"] for n in cell["nodes"]],
        "colocate": {"vcs": ["sys"], "headroom_mib": "2G"},
    }
    config = base / "hivebatch.yaml"
    config.write_text(yaml.safe_dump(data))
    config.chmod(0o644)
    proc = subprocess.run([str(PROJECT / "scripts" / "quickstart"), "--setup"], capture_output=True, text=True,
                          env={**os.environ, "HIVEBATCH_CONFIG": str(config)}, timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield Site(base, config, Path(proc.stdout.strip().splitlines()[-1]))
    shutil.rmtree(base, ignore_errors=True)


def _slice_of(job: Any) -> tuple[str, int, int]:
    ((node, per_gpu),) = job.shards.items()
    ((gpu, shards),) = per_gpu.items()
    return node, gpu, shards


def test_students_gpu_mem_jobs_binpack_onto_one_gpu_and_see_their_limit(
    site: Site, slurm_lab: Any, lab_jobs: list[int]
) -> None:
    first = site.hsub("carol", lab_jobs, "-A", "sys", "--gpu-mem", "8G")
    second = site.hsub("carol", lab_jobs, "-A", "sys", "--gpu-mem", "8G")
    jobs = site.until_running(slurm_lab, [first, second])
    node, gpu, shards = _slice_of(jobs[first])
    assert shards == 8 and _slice_of(jobs[second]) == (node, gpu, 8)  # binpacked onto the same GPU
    assert jobs[first].gpus == {} and f"shard:g{gpu}:8" in str(jobs[first].tres_per_node)
    for jid in (first, second):
        out = slurm_lab.wait_for_file(site.dir / f"slice-{jid}.out", "slice host=")
        assert f"slice host={node} cvd={gpu} mem=8192 frac=0.250" in out
        row = site.hq_row("carol", jid)
        assert row["gpu_mem_mib"] == 8192 and row["placement"] == {node: [gpu]}
    plain = site.run("carol", "hq", "-j", str(first), "-o", "%i %{placement}")
    assert plain.stdout.splitlines()[1].split(maxsplit=1) == [str(first), f"{node}:[{gpu}] 8G/32G"]
    cluster = site.run(None, "hadmin", "cluster", "--format", "json")
    assert cluster.returncode == 0, cluster.stderr
    slots = {(n["name"], g["index"]): g for n in json.loads(cluster.stdout)["nodes"] for g in n["gpus"]}
    assert slots[(node, gpu)]["share"] == "shared sys 16G/32G 2 jobs"


def test_guaranteed_slice_preempts_a_colocated_opportunistic_slice(
    site: Site, slurm_lab: Any, lab_jobs: list[int]
) -> None:
    owner = site.hsub("carol", lab_jobs, "-A", "sys", "--gpu-mem", "8G")
    node, gpu, _ = _slice_of(site.until_running(slurm_lab, [owner])[owner])
    guest = site.hsub("alice", lab_jobs, "-A", "cv", "-q", "opportunistic", "--gpu-mem", "16G")
    assert _slice_of(site.until_running(slurm_lab, [guest])[guest]) == (node, gpu, 16)  # co-located
    more = site.hsub("carol", lab_jobs, "-A", "sys", "--gpu-mem", "16G")  # 8 + 16 + 16 > 32
    jobs = site.until_running(slurm_lab, [owner, more])
    assert _slice_of(jobs[more]) == (node, gpu, 16)
    # the cycle after the requeue may already have re-placed the guest on another GPU (the lab has free
    # ones): what must hold is that it left this GPU and was booked as preempted by the new slice
    guest_now = slurm_lab.backend().list_jobs([guest])[0]
    if not (guest_now.state == "PENDING" and guest_now.held):
        assert (node, gpu) not in {(n, g) for n, per in guest_now.shards.items() for g in per}
    events = site.run(
        None, "hadmin", "events", "--job", str(guest), "--kind", "preempted", "--format", "json"
    )
    assert events.returncode == 0, events.stderr
    (preempted,) = json.loads(events.stdout)
    assert f"requeued and held: job {more} needs its GPUs" in preempted["message"]


WHOLE_SCRIPT = """#!/bin/bash
echo "whole host=$(hostname) cvd=${CUDA_VISIBLE_DEVICES:-none}"
sleep 240
"""


def test_a_one_gpu_per_node_job_with_gpu_mem_holds_shards_and_a_slice_uses_the_rest(
    site: Site, slurm_lab: Any, lab_jobs: list[int]
) -> None:
    script = site.dir / "whole.sh"
    script.write_text(WHOLE_SCRIPT)
    script.chmod(0o755)
    proc = site.run("bob", "hsub", "--parsable", "-A", "nlp", "-N", "2", "--gpus", "2", "--gpu-mem", "8G",
                    "-o", str(site.dir / "whole-%j.out"), str(script))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "holds 8G of each" in proc.stderr
    whole = int(proc.stdout.strip())
    lab_jobs.append(whole)
    site.mine.add(whole)
    job = site.until_running(slurm_lab, [whole])[whole]
    assert job.gpus == {} and len(job.shards) == 2, (job.gpus, job.shards)
    ((gpu,),) = {tuple(per) for per in job.shards.values()}
    assert job.shards == {n: {gpu: 8} for n in job.nodes}  # 8 shards of the same GPU on each node
    out = slurm_lab.wait_for_file(site.dir / f"whole-{whole}.out", "whole host=")
    assert re.search(rf"whole host=({'|'.join(job.nodes)}) cvd={gpu}\b", out), out
    row = site.hq_row("bob", whole)
    assert row["placement"] == {n: [gpu] for n in job.nodes} and row["gpus"] == 2

    # a 20G slice of nlp binpacks onto the 24G the whole job leaves on one of its GPUs
    part = site.hsub("bob", lab_jobs, "-A", "nlp", "--gpu-mem", "20G")
    jobs = site.until_running(slurm_lab, [whole, part])
    node, sgpu, shards = _slice_of(jobs[part])
    assert node in job.nodes and (sgpu, shards) == (gpu, 20)
    cluster = site.run(None, "hadmin", "cluster", "--format", "json")
    assert cluster.returncode == 0, cluster.stderr
    slots = {(n["name"], g["index"]): g for n in json.loads(cluster.stdout)["nodes"] for g in n["gpus"]}
    assert slots[(node, gpu)]["share"] == "whole+shared nlp 28G/32G 1 job"
    # Slurm itself agrees: 8 + 20 of the GPU's 32 shards are in use, a 12G slice no longer fits there
    more = site.hsub("bob", lab_jobs, "-A", "nlp", "--gpu-mem", "12G")
    third = site.until_running(slurm_lab, [more])[more]
    assert _slice_of(third)[:2] != (node, gpu)
