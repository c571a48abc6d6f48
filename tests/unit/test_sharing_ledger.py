"""The sharing ledger on top of the cell allocator: binpack inside the VC's cells, share cells bound
and released, whole-GPU jobs kept apart unless a node allows mixing, co-location and preemption."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from hivebatch.cells import CellAllocator, parse_cluster_config
from hivebatch.cells.types import Request
from hivebatch.sharing import SharingConfig, SharingLedger, parse_sharing_config

GiB = 1024


def lab_config(sharing: dict | None = None) -> dict:
    data: dict[str, Any] = {
        "cluster": {
            "cell_types": {
                "V100": {"memory": "32G"},
                "V100-SWITCH": {"child": "V100", "count": 2},
                "V100-SOCKET": {"child": "V100-SWITCH", "count": 2},
                "V100-NODE": {"child": "V100-SOCKET", "count": 2, "node": True},
            },
            "physical_cells": [{"type": "V100-NODE", "nodes": [f"node{i}"]} for i in (1, 2, 3, 4)],
        },
        "virtual_clusters": {
            "cv": {"cells": {"V100-NODE": 1}},
            "nlp": {"cells": {"V100-SOCKET": 2}},
            "sys": {"cells": {"V100-SWITCH": 1}},
        },
    }
    if sharing is not None:
        data["sharing"] = sharing
    return data


# --- a small stand-in for the cell allocator, enough for 1-GPU cells -------------------------------


@dataclass
class Req:
    job_id: str
    vc: str
    gpus: int
    nodes: int | None = None
    gpu_type: str | None = None
    within: str | None = None
    priority: int = 0
    avoid_nodes: frozenset[str] = frozenset()


@dataclass
class Dec:
    result: str
    placement: dict[str, list[int]] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None


class OneGpuAllocator:
    """Each VC may bind as many GPUs as its cells hold; opportunistic jobs take any free GPU and are
    preempted first. Only what the ledger asks of the cell core (1-GPU cells) is modelled."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.gpus = [(n.name, i) for n in spec.nodes for i in n.gpu_indices]
        self.held: dict[tuple[str, int], tuple[str, str, int]] = {}

    def _used(self, vc: str) -> int:
        return sum(1 for _, v, p in self.held.values() if v == vc and p >= 0)

    def _decide(self, req: Req) -> tuple[Dec, tuple[str, int] | None]:
        assert req.gpus == 1
        free = [g for g in self.gpus if g not in self.held and g[0] not in req.avoid_nodes]
        if req.priority >= 0 and self._used(req.vc) >= self.spec.vc_gpus(req.vc):
            return Dec("waiting", reason=f"VC {req.vc} has no free cell"), None
        if free:
            return Dec("placed", {free[0][0]: [free[0][1]]}), free[0]
        if req.priority >= 0:
            opp = [g for g, (_, _, p) in self.held.items() if p < 0]
            if opp:
                g = opp[0]
                return Dec("placed", {g[0]: [g[1]]}, preempted=[self.held[g][0]]), g
        return Dec("waiting", reason="no free GPU"), None

    def try_allocate(self, req: Req) -> Dec:
        return self._decide(req)[0]

    def allocate(self, req: Req) -> Dec:
        d, g = self._decide(req)
        if g is not None:
            for jid in d.preempted:
                self.release(jid)
            self.held[g] = (req.job_id, req.vc, req.priority)
        return d

    def release(self, job_id: str) -> None:
        keys = [g for g, (j, _, _) in self.held.items() if j == job_id]
        if not keys:
            raise KeyError(job_id)
        for g in keys:
            del self.held[g]

    def adopt(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> Dec:
        keys = [(n, i) for n, gs in placement.items() for i in gs]
        busy = [self.held[k] for k in keys if k in self.held]
        if any(p >= 0 or priority < 0 for _, _, p in busy):
            return Dec("rejected", error="GPU busy")
        preempted = sorted({j for j, _, _ in busy})
        for j in preempted:
            self.release(j)
        for k in keys:
            self.held[k] = (job_id, vc, priority)
        return Dec("placed", dict(placement), preempted=preempted)

    def jobs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (n, i), (j, v, p) in sorted(self.held.items()):
            st = out.setdefault(j, SimpleNamespace(job_id=j, vc=v, priority=p, placement={}))
            st.placement.setdefault(n, []).append(i)
        return out

    def take(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> None:
        """A whole-GPU job placed by the controller."""
        assert self.adopt(job_id, vc, priority, placement).result == "placed"

    def holders(self) -> set[str]:
        return {j for j, _, _ in self.held.values()}


class RealAllocator(CellAllocator):
    def take(self, job_id: str, vc: str, priority: int, placement: dict[str, list[int]]) -> None:
        d = self.adopt(job_id, vc, priority, placement)
        assert d.result == "placed", d

    def holders(self) -> set[str]:
        return set(self.jobs())


@pytest.fixture(params=["fake", "real"])
def make(request: pytest.FixtureRequest) -> Callable[..., tuple[SharingLedger, Any]]:
    """A ledger over the stand-in allocator and over the real cell core; both must behave alike."""
    built: list[SharingLedger] = []

    def _make(sharing: dict | None = None) -> tuple[SharingLedger, Any]:
        data = lab_config(sharing)
        spec = parse_cluster_config(data)
        cfg = parse_sharing_config(data, {n.name for n in spec.nodes}, set(spec.vcs))
        if request.param == "fake":
            fake = OneGpuAllocator(spec)
            led = SharingLedger(fake, spec, cfg, request_factory=Req)
            built.append(led)
            return led, fake
        real = RealAllocator(spec)
        led = SharingLedger(real, spec, cfg)
        built.append(led)
        return led, real

    yield _make
    for led in built:
        led.check_invariants()


# --- fractional slices ------------------------------------------------------------------------------


Make = Callable[..., tuple[SharingLedger, Any]]


def at(d: Any) -> tuple[str | None, int | None]:
    return (d.node, d.gpu)


def test_slices_of_a_vc_binpack_onto_one_gpu_bound_as_a_share_cell(make: Make) -> None:
    led, alloc = make()
    d = [led.place(f"j{i}", "cv", 8 * GiB) for i in range(4)]
    assert {x.result for x in d} == {"placed"}
    assert len({at(x) for x in d}) == 1
    node, gpu = at(d[0])
    assert alloc.holders() == {f"share:{node}:{gpu}"}
    assert d[0].gres == f"shard:g{gpu}:8"
    assert led.describe("j0") == f"{node}:[{gpu}] 8G/32G"
    e = led.place("j4", "cv", 1 * GiB)
    assert e.result == "placed" and at(e) != (node, gpu)
    assert len(alloc.holders()) == 2
    # GPU 0 is full, the new GPU has 31G free: the next slice goes there
    f = led.place("j5", "cv", 2 * GiB)
    assert at(f) == at(e)


def test_seed_example_through_the_ledger_chooses_the_gpu_with_8g_left(make: Make) -> None:
    led, _ = make()
    # four shared GPUs of VC cv with 12G, 8G, 4G and 16G free
    for gpu, used in enumerate((20, 24, 28, 16)):
        assert led.adopt_slice(f"old{gpu}", "cv", 0, "node1", gpu, used * GiB).result == "placed"
    d = led.place("new", "cv", 8138)
    assert (d.node, d.gpu, d.mem_mib) == ("node1", 1, 8 * GiB)
    assert led.gpus()[("node1", 1)].free_mib == 0


def test_two_gpus_with_4g_each_refuse_an_8g_slice_when_the_vc_has_no_other_cell(make: Make) -> None:
    led, alloc = make()
    # VC sys holds 2 GPUs (one switch); fill each to 28G: 8G free in total, 4G per GPU
    assert led.adopt_slice("a", "sys", 0, "node1", 0, 28 * GiB).result == "placed"
    assert led.adopt_slice("b", "sys", 0, "node1", 1, 28 * GiB).result == "placed"
    d = led.place("c", "sys", 8 * GiB)
    assert d.result == "waiting"
    assert "8G" in (d.reason or "") and "sys" in (d.reason or "")
    assert led.place("d", "sys", 4 * GiB).result == "placed"
    assert alloc.holders() == {"share:node1:0", "share:node1:1"}


def test_last_slice_leaving_unbinds_the_gpu_cell(make: Make) -> None:
    led, alloc = make()
    a = led.place("a", "nlp", 4 * GiB)
    led.place("b", "nlp", 4 * GiB)
    assert led.release("a") == []
    assert alloc.holders() == {f"share:{a.node}:{a.gpu}"}
    assert led.release("b") == []
    assert alloc.holders() == set()
    assert led.gpus() == {}
    with pytest.raises(KeyError):
        led.release("b")
    # the same GPU can be bound again under the same synthetic id
    again = led.place("c", "nlp", 4 * GiB)
    assert again.result == "placed"


def test_share_cells_count_against_the_vc_guarantee(make: Make) -> None:
    led, _ = make()
    assert led.place("a", "sys", 20 * GiB).result == "placed"
    assert led.place("b", "sys", 20 * GiB).result == "placed"  # second GPU of sys's 2
    d = led.place("c", "sys", 20 * GiB)
    assert d.result == "waiting"


def test_bad_requests_are_rejected_with_what_to_fix(make: Make) -> None:
    led, _ = make()
    assert "whole GPUs" in (led.place("a", "cv", 40 * GiB).error or "")
    assert "unknown virtual cluster" in (led.place("a", "xx", GiB).error or "")
    assert "unknown GPU type" in (led.place("a", "cv", GiB, gpu_type="A100").error or "")
    led.place("a", "cv", GiB)
    assert "already" in (led.place("a", "cv", GiB).error or "")
    off, _ = make({"enabled": False})
    assert "switched off" in (off.place("z", "cv", GiB).error or "")


def test_is_fractional(make: Make) -> None:
    led, _ = make()
    assert led.is_fractional(1, 8 * GiB)
    assert not led.is_fractional(1, 32 * GiB)  # the whole GPU: no point sharing
    assert not led.is_fractional(2, 8 * GiB)  # several GPUs: whole GPUs with a declared use
    assert not led.is_fractional(1, None)


# --- whole-GPU jobs and mixing -------------------------------------------------------------------


def test_whole_gpu_and_slices_never_mix_by_default(make: Make) -> None:
    led, alloc = make()
    alloc.take("w1", "cv", 0, {"node1": [0]})
    assert not led.note_whole_job("w1", "cv", 0, {"node1": [0]}, 8 * GiB)
    assert led.whole_job_gres("cv", {"node1": [0]}, 8 * GiB) == "gpu:g0:1"
    d = led.place("s", "cv", 4 * GiB)
    assert d.result == "placed" and at(d) != ("node1", 0)


def test_mixed_node_lets_a_vcs_slices_use_what_its_whole_job_left(make: Make) -> None:
    led, alloc = make({"allow_mixed_nodes": ["node1"]})
    # Slurm grants shards of one GPU per node only: a 2-GPU job keeps its GPUs whole
    assert led.whole_job_gres("cv", {"node1": [0, 1]}, 20 * GiB) == "gpu:g0:1,gpu:g1:1"
    alloc.take("w1", "cv", 0, {"node1": [0]})
    assert led.whole_job_gres("cv", {"node1": [0]}, 20 * GiB) == "shard:g0:20"
    assert led.note_whole_job("w1", "cv", 0, {"node1": [0]}, 20 * GiB)
    d = led.place("s", "cv", 12 * GiB)
    assert at(d) == ("node1", 0) and d.result == "placed"
    # binpack: 20G (whole job) + 12G leaves nothing on GPU 0, so the next slice opens another GPU
    assert led.gpus()[("node1", 0)].free_mib == 0
    assert at(led.place("s2", "cv", 1 * GiB)) != ("node1", 0)
    # another VC's slice never lands on cv's GPU
    e = led.place("t", "nlp", 4 * GiB)
    assert at(e) != ("node1", 0)
    # a whole job declaring the whole GPU leaves nothing: it gets gpu gres
    assert led.whole_job_gres("cv", {"node1": [2]}, 32 * GiB) == "gpu:g2:1"
    # the whole job ends: its remaining slice keeps the GPU as a share cell of cv
    alloc.release("w1")
    assert led.release_whole_job("w1") == []
    assert "share:node1:0" in alloc.holders()
    assert led.release("s") == []
    assert "share:node1:0" not in alloc.holders()


# --- opportunistic slices and co-location -----------------------------------------------------------


def test_opportunistic_slices_pack_on_a_free_gpu_and_are_preempted_together(make: Make) -> None:
    led, alloc = make()
    a = led.place("o1", "cv", 8 * GiB, priority=-1)
    b = led.place("o2", "nlp", 8 * GiB, priority=-1)
    assert a.result == b.result == "placed" and at(a) == at(b)
    assert not a.colocated
    cell = f"share-opp:{a.node}:{a.gpu}"
    assert alloc.holders() == {cell}
    # guaranteed work of a VC starts on that very GPU: the cell core preempts the opportunistic cell
    d = alloc.adopt("g", "sys", 0, {a.node: [a.gpu]})
    assert d.preempted == [cell]
    assert led.translate_preempted(d.preempted) == ["o1", "o2"]
    assert led.slices() == {} and led.gpus() == {}


def test_colocation_uses_the_idle_part_above_guaranteed_use_and_headroom(make: Make) -> None:
    led, _ = make({"colocate": {"vcs": ["sys"], "headroom_mib": "2G", "max_jobs_per_gpu": 2}})
    g = led.place("g1", "sys", 8 * GiB)
    o = led.place("o1", "cv", 22 * GiB, priority=-1)  # 32 - 8 - 2 = 22 fits exactly
    assert at(o) == at(g) and o.colocated
    o2 = led.place("o2", "cv", 1 * GiB, priority=-1)  # nothing idle left above the headroom
    assert o2.result == "placed" and at(o2) != at(g) and not o2.colocated
    # not on GPUs of VCs without co-location
    h = led.place("g2", "cv", 8 * GiB)
    p = led.place("o3", "nlp", 20 * GiB, priority=-1)
    assert p.result == "placed" and at(p) != at(h)


def test_max_opportunistic_jobs_per_gpu_is_respected(make: Make) -> None:
    led, _ = make({"colocate": {"vcs": ["sys"], "headroom_mib": 0, "max_jobs_per_gpu": 1}})
    g = led.place("g", "sys", 4 * GiB)
    a = led.place("o1", "cv", 1 * GiB, priority=-1)
    b = led.place("o2", "cv", 1 * GiB, priority=-1)
    assert a.colocated and not b.colocated
    assert at(a) == at(g) and at(b) != at(g)


def test_guaranteed_slice_preempts_colocated_opportunistic_slices_first(make: Make) -> None:
    led, alloc = make({"colocate": {"vcs": ["sys"], "headroom_mib": 0, "max_jobs_per_gpu": 4}})
    g1 = led.place("g1", "sys", 8 * GiB)
    led.place("g2", "sys", 8 * GiB)  # same GPU (binpack)
    assert len(led.gpus()) == 1
    led.place("o1", "cv", 10 * GiB, priority=-1)
    led.place("o2", "cv", 4 * GiB, priority=-1)
    # sys has 2 GPUs (one switch): fill the other one with a whole-GPU job
    for i in range(1):
        d = alloc.allocate(Request(f"w{i}", "sys", 1, 1, None, None, 0))
        assert d.result == "placed"
    assert led.place("gx", "sys", 20 * GiB).result == "waiting"
    d = led.place("g3", "sys", 12 * GiB)  # 32-16-14 = 2 free: o1 (10G) must go
    assert d.result == "placed" and d.preempted == ["o1"]
    assert at(d) == at(g1)
    assert "o1" not in led.slices() and "o2" in led.slices()


def test_guaranteed_owner_leaving_turns_the_gpu_into_an_opportunistic_cell(make: Make) -> None:
    led, alloc = make({"colocate": {"vcs": ["sys"], "headroom_mib": "2G"}})
    g = led.place("g1", "sys", 8 * GiB)
    o = led.place("o1", "cv", 8 * GiB, priority=-1)
    assert o.colocated
    assert led.release("g1") == []
    assert alloc.holders() == {f"share-opp:{g.node}:{g.gpu}"}
    assert led.slice_of("o1") is not None
    assert led.release("o1") == []
    assert alloc.holders() == set()


def test_colocated_work_on_a_whole_gpu_job_follows_the_job(make: Make) -> None:
    led, alloc = make({"colocate": {"vcs": ["nlp"], "headroom_mib": "2G"}})
    alloc.take("w", "nlp", 0, {"node1": [0], "node2": [0]})
    assert led.note_whole_job("w", "nlp", 0, {"node1": [0], "node2": [0]}, 16 * GiB)
    o = led.place("o", "cv", 14 * GiB, priority=-1)
    assert o.colocated and at(o) == ("node1", 0)
    big = led.place("o-big", "cv", 15 * GiB, priority=-1)
    assert big.result == "placed" and not big.colocated
    # finished normally: the opportunistic slice keeps its GPU as an opportunistic cell
    alloc.release("w")
    assert led.release_whole_job("w") == []
    assert "share-opp:node1:0" in alloc.holders()


def test_whole_job_preempted_takes_its_colocated_slices_with_it(make: Make) -> None:
    led, alloc = make({"colocate": {"vcs": ["nlp"], "headroom_mib": 0}})
    alloc.take("w", "nlp", 0, {"node1": [0]})
    led.note_whole_job("w", "nlp", 0, {"node1": [0]}, 16 * GiB)
    led.place("o", "cv", 8 * GiB, priority=-1)
    # the cell core hands the GPU to a higher-priority job of nlp and reports w as preempted
    alloc.release("w")
    alloc.take("w2", "nlp", 1, {"node1": [0]})
    assert led.translate_preempted(["w"]) == ["w", "o"]
    assert led.slices() == {}


def test_snapshot_round_trip(make: Make) -> None:
    led, alloc = make({"colocate": {"vcs": ["sys"], "headroom_mib": 0}})
    g = led.place("g1", "sys", 8 * GiB)
    led.place("o1", "cv", 8 * GiB, priority=-1)
    snap = json.loads(json.dumps(led.snapshot()))
    back = SharingLedger.restore(alloc, led.spec, led.config, snap, request_factory=led._request)
    assert back.slices() == led.slices()
    assert back.gpus() == led.gpus()
    assert back.describe("o1") == f"{g.node}:[{g.gpu}] 8G/32G"
    back.check_invariants()


def test_default_config_object() -> None:
    assert SharingConfig().enabled
