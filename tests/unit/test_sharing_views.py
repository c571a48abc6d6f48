"""How a GPU slice shows: hq's placement ``node2:[3] 8G/32G`` and ``--json`` fields, and hadmin
cluster's shared GPUs — read back from what a controller cycle (fake Slurm) recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from controller_support import CONFIG, Env, make_env

from hivebatch.cli.hq.columns import DEFAULT_FIELDS, Column, render_plain
from hivebatch.cli.hq.rows import JobRow, merge_ledger, row_from_slurm
from hivebatch.reports.gpumap import build_cluster_map
from hivebatch.reports.mapview import map_dict, plain_slot, summary_lines
from hivebatch.reports.source import load_slots
from hivebatch.reports.topology import node_layouts
from hivebatch.sharing.integration import add_gpu_capacity

GiB = 1024


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path, CONFIG)


def _rows(env: Env, *ids: int) -> list[JobRow]:
    rows = [merge_ledger(row_from_slurm(env.slurm.job(j)), env.job(j)) for j in ids]
    add_gpu_capacity(rows, env.ctx.data)
    return rows


def test_hq_shows_a_slice_with_its_memory_of_the_gpu(env: Env) -> None:
    jid = env.submit("carol", "sys", 1, gpu_mem_mib=8 * GiB)
    whole = env.submit("carol", "sys", 1)
    env.cycle()
    (row, plain) = _rows(env, jid, whole)
    ((node, (gpu,)),) = env.job(jid).placement.items()
    text = render_plain([row, plain], [Column(f) for f in DEFAULT_FIELDS], False, False, row.submit_time)
    assert f"{node}:[{gpu}] 8G/32G" in text.splitlines()[0]
    assert "G/32G" not in text.splitlines()[1]  # a whole GPU shows as before
    data = row.to_json()
    assert (data["gpu_mem_mib"], data["gpu_total_mib"], data["placement"]) == (8192, 32768, {node: [gpu]})
    assert plain.to_json()["gpu_mem_mib"] is None


def test_hadmin_cluster_shows_the_shared_gpu_and_its_slices(env: Env) -> None:
    a = env.submit("carol", "sys", 1, gpu_mem_mib=8 * GiB)
    b = env.submit("carol", "sys", 1, gpu_mem_mib=12 * GiB)
    env.cycle()
    ((node, (gpu,)),) = env.job(a).placement.items()
    assert env.job(b).placement == {node: [gpu]}
    with env.factory() as s:
        slots, _ = load_slots(s)
    cmap = build_cluster_map(node_layouts(env.ctx.data), slots, env.ctl.list_nodes())
    slot = next(x for n in cmap.nodes for x in n.slots if (x.node, x.index) == (node, gpu))
    assert slot.share == "shared sys 20G/32G 2 jobs" and slot.shared == 2 and not slot.free
    assert plain_slot(slot) == "shared" and cmap.counts()["shared"] == 1
    assert f"Shared GPUs: {node}:[{gpu}] shared sys 20G/32G 2 jobs." in summary_lines(cmap)
    gpus = {(n["name"], g["index"]): g for n in map_dict(cmap)["nodes"] for g in n["gpus"]}
    assert gpus[(node, gpu)]["share"] == slot.share


def test_gpus_shared_by_unknown_work_count_as_foreign_not_as_slices() -> None:
    from hivebatch.reports.gpumap import ClusterMap, GpuSlot, NodeMap

    slots = [
        GpuSlot("node2", 0, kind="foreign", shared=1),  # shards Slurm shows in use, not hivebatch's
        GpuSlot("node2", 1, kind="guaranteed", vc="sys", shared=2, share="shared sys 16G/32G 2 jobs"),
        GpuSlot("node2", 2),
    ]
    counts = ClusterMap([NodeMap("node2", "V100", slots, [("V100", 1)])]).counts()
    assert (counts["foreign"], counts["shared"], counts["free"]) == (1, 1, 1)
