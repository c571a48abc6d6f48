"""The cell allocator's API: split/merge, binding, priorities, bad nodes, adopt, snapshots."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hivebatch.cells import CellAllocator, Request, UnknownJobError, UnknownNodeError, parse_cluster_config


def lab(vcs: dict[str, dict[str, int]] | None = None, nodes: int = 4, rack: bool = False) -> CellAllocator:
    types: dict[str, Any] = {
        "V100": {"memory": "32G"},
        "V100-SWITCH": {"child": "V100", "count": 2},
        "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
        "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
    }
    if rack:
        types["V100-RACK"] = {"child": "V100-NODE", "count": 2}
        physical = [
            {"type": "V100-RACK", "nodes": [f"node{i + 1}", f"node{i + 2}"]} for i in range(0, nodes, 2)
        ]
    else:
        physical = [{"type": "V100-NODE", "nodes": [f"node{i + 1}" for i in range(nodes)]}]
    vcs = vcs or {
        "cv": {"V100-NODE": 1, "V100-SOCKET": 1},
        "nlp": {"V100-NODE": 2},
        "sys": {"V100-SWITCH": 1, "V100": 2},
    }
    data = {
        "cluster": {"cell_types": types, "physical_cells": physical},
        "virtual_clusters": {k: {"cells": v} for k, v in vcs.items()},
    }
    return CellAllocator(parse_cluster_config(data))


def req(job: str, vc: str, gpus: int, **kw: Any) -> Request:
    return Request(job_id=job, vc=vc, gpus=gpus, **kw)


def test_split_on_allocate_merge_on_release() -> None:
    a = lab()
    assert a.free_cells()["V100"] == {"V100": 0, "V100-SWITCH": 0, "V100-SOCKET": 0, "V100-NODE": 4}
    d = a.allocate(req("s", "sys", 1))
    assert d.placement == {"node1": [0]}
    # node1 split down to one GPU: its buddies are listed one level each
    assert a.free_cells()["V100"] == {"V100": 1, "V100-SWITCH": 1, "V100-SOCKET": 1, "V100-NODE": 3}
    a.release("s")
    assert a.free_cells()["V100"] == {"V100": 0, "V100-SWITCH": 0, "V100-SOCKET": 0, "V100-NODE": 4}
    a.check_invariants()


def test_bind_when_used_unbind_when_idle() -> None:
    a = lab()
    assert a.vc_view("cv").cells["V100-SOCKET"].bound == 0
    a.allocate(req("c1", "cv", 2))
    a.allocate(req("c2", "cv", 2))
    v = a.vc_view("cv")
    assert v.cells["V100-SOCKET"].bound == 1 and v.cells["V100-NODE"].bound == 0
    assert v.gpus_used == 4 and v.gpus_total == 12
    a.release("c1")
    assert a.vc_view("cv").cells["V100-SOCKET"].bound == 1  # c2 still there
    a.release("c2")
    assert a.vc_view("cv").cells["V100-SOCKET"].bound == 0
    assert a.free_cells()["V100"]["V100-NODE"] == 4


def test_packing_prefers_cells_in_use() -> None:
    a = lab()
    p1 = a.allocate(req("n1", "nlp", 2)).placement
    p2 = a.allocate(req("n2", "nlp", 2)).placement
    assert list(p1) == list(p2)  # same node
    assert a.vc_view("nlp").cells["V100-NODE"].bound == 1


def test_tightest_shape_and_multi_node() -> None:
    a = lab()
    d = a.allocate(req("big", "nlp", 16))
    assert d.result == "placed" and d.nodes == 2 and d.gpus_per_node == 8
    assert all(ix == list(range(8)) for ix in d.placement.values())
    d = a.allocate(req("odd", "cv", 12))  # 12 = 2 x 6: cv holds one whole node only
    assert d.result == "rejected" and "needs 2 nodes" in (d.error or "")


def test_waiting_reason_in_plain_words() -> None:
    a = lab({"nlp": {"V100-NODE": 3}, "sys": {"V100-SOCKET": 1}})
    a.allocate(req("n1", "nlp", 1))
    d = a.allocate(req("n2", "nlp", 24))
    assert d.result == "waiting"
    assert d.reason is not None and d.reason.startswith(
        "VC nlp has 2 free V100-NODE cells but the job needs 3 nodes"
    )


def test_within() -> None:
    a = lab()
    a.allocate(req("a", "nlp", 1))
    a.allocate(req("b", "nlp", 2))
    d = a.allocate(req("c", "nlp", 2, within="V100-SWITCH"))
    assert d.result == "placed"
    (node, idx) = next(iter(d.placement.items()))
    assert idx[0] // 2 == idx[1] // 2  # both GPUs behind one switch
    d = a.allocate(req("e", "nlp", 4, within="V100-SWITCH"))
    assert d.result == "rejected" and "does not fit within one V100-SWITCH" in (d.error or "")


def test_opportunistic_uses_unbound_and_is_preempted_exactly() -> None:
    a = lab({"x": {"V100-NODE": 2}})
    o1 = a.allocate(req("o1", "x", 8, priority=-1))
    o2 = a.allocate(req("o2", "x", 4, priority=-1))
    o3 = a.allocate(req("o3", "x", 4, priority=-1))
    assert {o1.result, o2.result, o3.result} == {"placed"}
    assert a.allocate(req("o4", "x", 8, priority=-1)).result == "placed"
    assert a.allocate(req("o5", "x", 8, priority=-1)).result == "placed"  # the cluster is full
    assert a.allocate(req("o6", "x", 1, priority=-1)).result == "waiting"
    d = a.allocate(req("g", "x", 4))
    assert d.result == "placed"
    assert len(d.preempted) == 1
    # exactly the jobs on the GPUs taken
    taken = {(n, i) for n, ix in d.placement.items() for i in ix}
    for j in d.preempted:
        assert j not in a.jobs()
    for j, st in a.jobs().items():
        if j != "g":
            assert not taken & {(n, i) for n, ix in st.placement.items() for i in ix}
    a.check_invariants()


def test_binding_prefers_cells_without_opportunistic_gpus() -> None:
    a = lab({"x": {"V100-NODE": 1}}, nodes=2)
    a.allocate(req("o", "x", 1, priority=-1))  # lands on node1
    d = a.allocate(req("g", "x", 8))
    assert d.placement == {"node2": list(range(8))} and d.preempted == []


def test_opportunistic_never_on_bound_gpus_and_keeps_away_from_guaranteed_nodes() -> None:
    a = lab({"x": {"V100-SOCKET": 1}}, nodes=2)
    a.allocate(req("g", "x", 1))  # binds a socket of node1
    d = a.allocate(req("o", "x", 2, priority=-1))
    assert d.placement == {"node2": [0, 1]}
    gm = a.gpu_map()
    assert gm["node2"][0].opportunistic and gm["node2"][0].job == "o"
    assert gm["node1"][0].vc == "x" and gm["node1"][1].vc == "x" and gm["node1"][1].job is None


def test_priority_preempts_only_same_vc_lower() -> None:
    a = lab({"x": {"V100-NODE": 1}, "y": {"V100-NODE": 1}}, nodes=2)
    a.allocate(req("x0", "x", 8, priority=0))
    a.allocate(req("y0", "y", 8, priority=0))
    d = a.allocate(req("x1", "x", 2, priority=1))
    assert d.result == "placed" and d.preempted == ["x0"]
    d = a.allocate(req("x2", "x", 8, priority=1))  # equal priority never preempts
    assert d.result == "waiting"
    assert "y0" in a.jobs()


def test_bad_node_never_bound_and_capacity_drops() -> None:
    a = lab({"x": {"V100-NODE": 2}, "y": {"V100-NODE": 2}})
    a.allocate(req("x1", "x", 8))
    (node,) = a.jobs()["x1"].placement
    a.set_node_bad(node)
    assert "x1" in a.jobs()  # keeps running
    a.set_node_bad("node4")
    d = a.allocate(req("y1", "y", 8))
    assert d.result == "placed" and "node4" not in d.placement
    d = a.allocate(req("y2", "y", 8))
    assert d.result == "waiting" and "node4" in (d.reason or "")
    view = a.vc_view("y")
    assert view.capacity == 8 and view.reason is not None and "node4" in view.reason
    assert view.cells["V100-NODE"].unavailable == 1
    a.set_node_healthy("node4")
    assert a.vc_view("y").capacity == 16
    d = a.allocate(req("y3", "y", 8))
    assert d.result == "placed" and set(d.placement) <= {"node3", "node4"}


def test_foreign_gpus_are_avoided() -> None:
    a = lab({"x": {"V100-SOCKET": 1}}, nodes=1)
    a.occupy_foreign("slurm:77", "node1", [0, 1, 2, 3])
    d = a.allocate(req("g", "x", 4))
    assert d.placement == {"node1": [4, 5, 6, 7]}
    assert a.gpu_map()["node1"][0].foreign
    a.release("g")
    a.release_foreign("slurm:77")
    assert not a.gpu_map()["node1"][0].foreign
    with pytest.raises(UnknownNodeError):
        a.occupy_foreign("t", "node9", [0])


def test_try_allocate_leaves_state_unchanged() -> None:
    a = lab()
    a.allocate(req("o", "sys", 8, priority=-1))
    before = json.dumps(a.snapshot(), sort_keys=True)
    probe = a.try_allocate(req("c", "cv", 8))
    assert json.dumps(a.snapshot(), sort_keys=True) == before
    real = a.allocate(req("c", "cv", 8))
    assert (probe.result, probe.placement, probe.preempted) == (real.result, real.placement, real.preempted)


def test_release_errors() -> None:
    a = lab()
    a.allocate(req("j", "cv", 1))
    a.release("j")
    with pytest.raises(UnknownJobError, match="already released"):
        a.release("j")
    with pytest.raises(UnknownJobError, match="unknown job"):
        a.release("never")
    w = a.allocate(req("w", "sys", 4))
    assert w.result == "rejected"
    a.allocate(req("n", "nlp", 16))
    wait = a.allocate(req("n2", "nlp", 8))
    assert wait.result == "waiting"
    a.release("n2")  # a waiting job is released once without error


def test_adopt_and_snapshot_restore() -> None:
    a = lab()
    assert a.adopt("j1", "nlp", 0, {"node3": [0, 1, 2, 3], "node4": [0, 1, 2, 3]}).result == "placed"
    assert a.adopt("o1", "sys", -1, {"node1": [7]}).result == "placed"
    d = a.adopt("bad", "cv", 0, {"node3": [0]})
    assert d.result == "rejected" and "already used by job j1" in (d.error or "")
    assert a.vc_view("nlp").cells["V100-NODE"].bound == 2
    a.set_node_bad("node2")
    a.occupy_foreign("f", "node1", [6])
    snap = json.loads(json.dumps(a.snapshot()))
    b = CellAllocator.restore(a.spec, snap)
    assert b.jobs() == a.jobs()
    assert b.vc_views() == a.vc_views()
    assert b.gpu_map() == a.gpu_map()
    b.check_invariants()
    # a cell bound by adopt is usable for more work of the VC
    assert b.allocate(req("j2", "nlp", 4)).placement in ({"node3": [4, 5, 6, 7]}, {"node4": [4, 5, 6, 7]})


def test_default_gpu_type_is_first_chain_with_room() -> None:
    data = {
        "cluster": {
            "cell_types": {
                "V100-NODE": {"child": "V100", "count": 2, "node": True},
                "K80-NODE": {"child": "K80", "count": 2, "node": True},
            },
            "physical_cells": [{"type": "V100-NODE", "nodes": ["v1"]}, {"type": "K80-NODE", "nodes": ["k1"]}],
        },
        "virtual_clusters": {"x": {"cells": {"V100-NODE": 1, "K80-NODE": 1}}},
    }
    a = CellAllocator(parse_cluster_config(data))
    assert a.allocate(req("1", "x", 2)).placement == {"v1": [0, 1]}
    d = a.allocate(req("2", "x", 2))
    assert d.placement == {"k1": [0, 1]} and d.gpu_type == "K80"
    assert a.allocate(req("3", "x", 1)).result == "waiting"


def test_bad_requests_rejected() -> None:
    a = lab()
    assert "unknown VC" in (a.allocate(req("a", "zz", 1)).error or "")
    assert "at least 1 GPU" in (a.allocate(req("b", "cv", 0)).error or "")
    assert "unknown GPU type" in (a.allocate(req("c", "cv", 1, gpu_type="A100")).error or "")
    assert "unknown cell type" in (a.allocate(req("d", "cv", 1, within="RACK")).error or "")
    assert "split evenly" in (a.allocate(req("e", "cv", 5, nodes=2)).error or "")
    assert "priority must be" in (a.allocate(req("f", "cv", 1, priority=-3)).error or "")


def test_restore_with_a_changed_config_keeps_what_fits() -> None:
    a = lab()
    a.allocate(req("n", "nlp", 16))
    a.allocate(req("c", "cv", 4))
    snap = a.snapshot()
    smaller = lab({"cv": {"V100-NODE": 1}}, nodes=2)  # nlp gone, node3/node4 gone
    b = CellAllocator.restore(smaller.spec, snap)
    b.check_invariants()
    assert "n" not in b.jobs()
    assert set(b.jobs()) <= {"c"}


def test_a_vc_the_config_no_longer_has_keeps_only_opportunistic_work() -> None:
    # an admin took VC "gone" out of the config while its jobs ran: one may stay as opportunistic work
    a = lab({"x": {"V100-NODE": 1}}, nodes=1)
    d = a.adopt("g1", "gone", 0, {"node1": [0]})
    assert d.result == "rejected" and "unknown VC gone" in (d.error or "")
    assert a.adopt("g1", "gone", -1, {"node1": [0, 1]}).result == "placed"
    a.check_invariants()
    snap = json.loads(json.dumps(a.snapshot()))
    assert CellAllocator.restore(a.spec, snap).jobs() == a.jobs()
    # a VC that needs the GPUs preempts it, as any opportunistic job
    d = a.allocate(req("x1", "x", 8))
    assert d.result == "placed" and d.preempted == ["g1"]
    a.check_invariants()


def test_adopt_keeping_guarantees_refuses_gpus_whose_cells_another_vc_needs() -> None:
    # x is guaranteed a whole node; y's first single-GPU cell split node1 already
    a = lab({"x": {"V100-NODE": 1}, "y": {"V100": 2}}, nodes=2)
    assert a.allocate(req("y1", "y", 1)).placement == {"node1": [0]}
    # a requeued job of y must resume on GPU 3: on node2 its cell would split x's last whole node
    d = a.adopt("y2", "y", 0, {"node2": [3]}, keep_guarantees=True)
    assert d.result == "rejected"
    assert d.error == "its VC's cells on node2 would leave another VC's guaranteed cells without GPUs"
    assert "y2" not in a.jobs()
    a.check_invariants()
    assert a.adopt("y2", "y", 0, {"node1": [3]}, keep_guarantees=True).placement == {"node1": [3]}
    assert a.allocate(req("x1", "x", 8)).placement == {"node2": list(range(8))}
    # a job that already runs is adopted where it runs, whatever it costs: then x waits
    b = lab({"x": {"V100-NODE": 1}, "y": {"V100": 2}}, nodes=2)
    b.allocate(req("y1", "y", 1))
    assert b.adopt("y2", "y", 0, {"node2": [3]}).result == "placed"
    assert b.allocate(req("x1", "x", 8)).result == "waiting"


def test_adopt_binds_one_cell_for_gpus_spanning_small_cells() -> None:
    a = lab({"x": {"V100-SWITCH": 1, "V100-NODE": 1}}, nodes=2)
    d = a.adopt("j", "x", 0, {"node1": [0, 1, 2, 3]})
    assert d.result == "placed"
    view = a.vc_view("x")
    assert view.cells["V100-NODE"].bound == 1 and view.cells["V100-SWITCH"].bound == 0
    a.check_invariants()


def test_nodes_one_request_avoids_stay_free_for_the_other_vcs_guarantees() -> None:
    # binding nlp's node cell on node3 leaves nodes 1, 2 and 4 for cv (a node and a socket) and sys (a
    # switch and two GPUs); counted as busy, they made every guarantee look at risk and nlp waited
    alloc = lab()
    d = alloc.allocate(req("1", "nlp", 1, avoid_nodes=frozenset({"node1", "node2", "node4"})))
    assert d.result == "placed" and list(d.placement) == ["node3"], d.reason
    d = alloc.allocate(req("2", "nlp", 2, nodes=2, avoid_nodes=frozenset({"node1", "node2"})))
    assert d.result == "placed" and sorted(d.placement) == ["node3", "node4"], d.reason
    alloc.check_invariants()
    assert not any(u.foreign for gpus in alloc.gpu_map().values() for u in gpus.values())
    # the guarantees are whole: cv and sys still place everything they were promised
    for job, vc, gpus, nodes in (("3", "cv", 8, None), ("4", "cv", 4, None), ("5", "sys", 2, None),
                                 ("6", "sys", 1, None), ("7", "sys", 1, None)):  # fmt: skip
        assert alloc.allocate(req(job, vc, gpus, nodes=nodes)).result == "placed", (job, vc)
