"""The helpers hsub, the controller, hq and hadmin use: submission checks, rebuilding the ledger from
held slices, labels and GPU-hour shares."""

from __future__ import annotations

from typing import Any

import pytest

from hivebatch.cells import CellAllocator, Request, parse_cluster_config
from hivebatch.errors import HivebatchError
from hivebatch.sharing.integration import (
    HeldSlice,
    check_submission,
    describe_gpu,
    downgraded,
    is_slice,
    rebuild_ledger,
    slice_share,
    slice_text,
)

GiB = 1024


def config(sharing: dict | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "cluster": {
            "cell_types": {
                "V100": {"memory": "32G"},
                "V100-SWITCH": {"child": "V100", "count": 2},
                "V100-NODE": {"child": "V100-SWITCH", "count": 2, "node": True},
            },
            "physical_cells": [
                {"type": "V100-NODE", "nodes": ["node1"]},
                {"type": "V100-NODE", "nodes": ["node2"]},
            ],
        },
        "virtual_clusters": {"cv": {"cells": {"V100-NODE": 1}}, "sys": {"cells": {"V100-SWITCH": 1}}},
    }
    if sharing is not None:
        data["sharing"] = sharing
    return data


def test_submission_of_a_slice_gets_its_environment_and_a_note() -> None:
    data = config()
    spec = parse_cluster_config(data)
    env, notes = check_submission(data, spec, 1, 8 * GiB, None)
    assert env["HIVEBATCH_GPU_MEM_MIB"] == "8192" and env["HIVEBATCH_GPU_MEM_FRACTION"] == "0.250"
    assert "8G of its 32G (25%)" in notes[0]
    assert is_slice(spec, 1, 8 * GiB) and not is_slice(spec, 2, 8 * GiB) and not is_slice(spec, 1, 32 * GiB)


def test_submission_errors_say_what_to_change() -> None:
    data = config()
    spec = parse_cluster_config(data)
    with pytest.raises(HivebatchError, match="more than one V100 GPU has"):
        check_submission(data, spec, 1, 40 * GiB, "V100")
    off = config({"enabled": False})
    with pytest.raises(HivebatchError, match="switched off"):
        check_submission(off, parse_cluster_config(off), 1, 4 * GiB, None)
    nomem = config()
    nomem["cluster"]["cell_types"]["V100"] = {}
    with pytest.raises(HivebatchError, match="memory: on the leaf"):
        check_submission(nomem, parse_cluster_config(nomem), 1, 4 * GiB, None)
    # several GPUs with --gpu-mem: whole GPUs with a declared use, no slice environment
    env, notes = check_submission(data, spec, 2, 20 * GiB, None)
    assert env == {} and "2 whole GPU(s)" in notes[0]
    assert check_submission(data, spec, 1, None, None) == ({}, [])


def test_rebuild_books_held_slices_and_reports_what_cannot_be_booked() -> None:
    data = config({"colocate": {"vcs": ["sys"], "headroom_mib": 0}})
    spec = parse_cluster_config(data)
    alloc = CellAllocator(spec)
    stale = alloc.allocate(Request("share:node9:9", "cv", 1, 1, None, None, 0))
    assert stale.result == "placed"
    held = [
        HeldSlice("11", "sys", 0, "node1", 0, 8 * GiB),
        HeldSlice("12", "sys", 0, "node1", 0, 8 * GiB),
        HeldSlice("13", "cv", -1, "node1", 0, 12 * GiB),  # co-located on sys's GPU
        HeldSlice("14", "cv", 0, "node1", 0, 4 * GiB),  # cv may not use sys's GPU
        HeldSlice("15", "cv", 0, "node2", 3, 20 * GiB),
    ]
    led, failed = rebuild_ledger(alloc, spec, data, held)
    assert [h.job_id for h, _ in failed] == ["14"]
    assert set(led.slices()) == {"11", "12", "13", "15"}
    assert "share:node9:9" not in alloc.jobs()
    assert {"share:node1:0", "share:node2:3"} <= set(alloc.jobs())
    g = led.gpus()[("node1", 0)]
    assert describe_gpu(g) == "shared sys 28G/32G 3 jobs +1 opp"
    led.check_invariants()


def test_a_guaranteed_slice_no_cell_of_its_vc_holds_is_kept_as_opportunistic_work() -> None:
    # the config changed while the slices ran: VC "gone" is no longer in it
    data = config({})
    spec = parse_cluster_config(data)
    held = [HeldSlice("21", "gone", 0, "node1", 1, 8 * GiB), HeldSlice("22", "cv", 0, "node2", 3, 8 * GiB)]
    led, failed = rebuild_ledger(CellAllocator(spec), spec, data, held)
    assert [h.job_id for h, _ in failed] == ["21"]  # without downgrade: its GPU is held as foreign
    alloc = CellAllocator(spec)
    led, failed = rebuild_ledger(alloc, spec, data, held, downgrade=True)
    assert failed == []
    assert [h.job_id for h in downgraded(led, held)] == ["21"]
    assert led.slices()["21"].priority < 0 and led.slices()["22"].priority == 0
    led.check_invariants()


def test_labels_and_shares() -> None:
    assert slice_text({"node2": [3]}, 8138, 32 * GiB) == "node2:[3] 8G/32G"
    assert slice_text({}, 1, 1) == "-"
    assert slice_share(8 * GiB, 32 * GiB) == 0.25
    assert slice_share(8000, 32 * GiB) == 0.25  # booked in whole shards


def test_requeued_slice_resumes_on_the_same_gpu_index_preferring_its_old_node() -> None:
    data = config({"colocate": {"vcs": ["sys"], "headroom_mib": 0}})
    spec = parse_cluster_config(data)
    alloc = CellAllocator(spec)
    led, failed = rebuild_ledger(alloc, spec, data, [HeldSlice("1", "cv", 0, "node1", 2, 24 * GiB)])
    assert failed == []
    # GPU 2 of node1 has 8G left: a 12G slice of cv that ran on GPU 2 must use GPU 2 of another node
    d = led.resume("2", "cv", 12 * GiB, 0, 2, nodes_first=["node1"])
    assert d.result == "waiting" and "GPU index 2" in (d.reason or "")  # cv's only cell is node1
    e = led.resume("3", "cv", 8 * GiB, 0, 2, nodes_first=["node2"])
    assert (e.node, e.gpu) == ("node1", 2)  # binpack on the shared GPU before a fresh one
    o = led.resume("4", "sys", 4 * GiB, -1, 3, nodes_first=["node2"])
    assert (o.result, o.node, o.gpu) == ("placed", "node2", 3)
    assert "share-opp:node2:3" in alloc.jobs()
    led.check_invariants()
