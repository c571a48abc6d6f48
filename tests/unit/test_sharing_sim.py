"""The fractional-job mix on the simulator, and random sequences against the real cell core."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hivebatch.cells import CellAllocator, parse_cluster_config
from hivebatch.cells.types import Request
from hivebatch.sharing import GpuUse, SharingLedger, account, parse_sharing_config
from hivebatch.sim.sharing_mix import MODES, compare, lab_cluster, sharing_workload, simulate_mix

GiB = 1024


def test_workload_is_reproducible_and_has_all_three_kinds() -> None:
    vc = {"cv": 12, "nlp": 16, "sys": 4}
    a = sharing_workload(7, 24, vc)
    assert a == sharing_workload(7, 24, vc)
    assert a != sharing_workload(8, 24, vc)
    assert {j.kind for j in a} == {"whole", "slice", "opp"}
    assert all(j.gpus <= vc[j.vc] for j in a)
    assert all(j.mem_mib <= 32 * GiB and j.mem_mib % GiB == 0 for j in a)


def test_every_mode_keeps_ledger_and_cell_core_consistent() -> None:
    data = lab_cluster()
    spec = parse_cluster_config(data)
    jobs = sharing_workload(3, 12, {v: spec.vc_gpus(v) for v in spec.vcs})
    for mode in MODES:
        r = simulate_mix(data, jobs, mode, 12 * 3600.0, check=True)
        assert r.done["slice"] > 0
        assert 0 <= r.mem_util_pct <= 100 and 0 <= r.held_pct <= 100


def test_sharing_beats_exclusive_gpus_on_the_same_mix() -> None:
    excl, binpack, coloc = compare(seed=2, hours=24)
    assert (excl.mode, binpack.mode, coloc.mode) == MODES
    # slices wait less and more jobs finish when fractional jobs share GPUs
    assert binpack.mean_wait_min["slice"] < excl.mean_wait_min["slice"]
    assert sum(binpack.done.values()) > sum(excl.done.values())
    assert binpack.mem_util_pct > excl.mem_util_pct
    # only co-location produces co-located GPU-hours
    assert excl.colocated_gpu_h == binpack.colocated_gpu_h == 0
    assert coloc.colocated_gpu_h > 0 and coloc.extra_capacity_pct > 0


def test_accounting_splits_guaranteed_opportunistic_and_colocated_hours() -> None:
    h = 3600.0
    uses = [
        GpuUse("w", "cv", "n1", 0, 1.0, 0, 2 * h),
        GpuUse("s", "cv", "n1", 1, 0.25, 0, 4 * h),
        GpuUse("o", "nlp", "n1", 0, 0.5, h, 3 * h, opportunistic=True, colocated=True),
        GpuUse("x", "nlp", "n1", 2, 1.0, -h, h, opportunistic=True),  # half before the window
    ]
    acc = account(uses, 0, 4 * h, cluster_gpus=4)
    assert acc.total.guaranteed == 2 + 1
    assert acc.total.opportunistic == 1 + 1
    assert acc.total.colocated == 1
    assert acc.per_gpu[("n1", 0)].guaranteed == 2 and acc.per_gpu[("n1", 0)].colocated == 1
    assert acc.per_vc["nlp"].opportunistic == 2
    assert acc.capacity_gpu_h == 16
    assert round(acc.extra_capacity_pct, 6) == round(100 / 3, 6)
    assert acc.utilization_pct == 100 * 5 / 16


op = st.one_of(
    st.tuples(
        st.just("slice"),
        st.sampled_from(["cv", "nlp", "sys"]),
        st.integers(1, 32),
        st.sampled_from([0, 1, -1]),
    ),
    st.tuples(
        st.just("whole"), st.sampled_from(["cv", "nlp", "sys"]), st.integers(1, 32), st.sampled_from([1, 2])
    ),
    st.tuples(st.just("end"), st.just(""), st.integers(0, 50), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(op, min_size=1, max_size=40))
def test_random_sequences_never_overbook_a_gpu(steps: list[tuple[str, str, int, int]]) -> None:
    data = lab_cluster()
    data["sharing"] = {
        "allow_mixed_nodes": ["node4"],
        "colocate": {"vcs": ["sys"], "nodes": ["node3"], "headroom_mib": "2G", "max_jobs_per_gpu": 3},
    }
    spec = parse_cluster_config(data)
    alloc = CellAllocator(spec)
    led = SharingLedger(alloc, spec, parse_sharing_config(data, {n.name for n in spec.nodes}, set(spec.vcs)))
    live: list[str] = []
    whole: set[str] = set()
    for i, (kind, vc, size, prio) in enumerate(steps):
        if kind == "slice":
            d = led.place(f"s{i}", vc, size * GiB, prio)
            assert d.result in ("placed", "waiting", "rejected")
            if d.result == "placed":
                assert d.mem_mib >= size * GiB
                live.append(f"s{i}")
            for p in d.preempted:
                assert led.slice_of(p) is None
                if p in live:
                    live.remove(p)
        elif kind == "whole":
            dec = alloc.allocate(Request(f"w{i}", vc, prio, None, None, None, 0))
            if dec.result == "placed":
                for p in led.translate_preempted(list(dec.preempted)):
                    if p in live:
                        live.remove(p)
                    whole.discard(p)
                led.note_whole_job(f"w{i}", vc, 0, dec.placement, size * GiB)
                live.append(f"w{i}")
                whole.add(f"w{i}")
        elif live:
            jid = live.pop(size % len(live))
            if jid in whole:
                whole.discard(jid)
                alloc.release(jid)
                dropped = led.release_whole_job(jid)
            else:
                dropped = led.release(jid)
            for p in dropped:
                if p in live:
                    live.remove(p)
        led.check_invariants()
        alloc.check_invariants()
        for g in led.gpus().values():
            assert g.free_mib >= 0
            # no opportunistic slice shares a GPU unless the holder allows it
            if g.kind != "opp" and g.opp_slices():
                assert led.config.colocate.allowed(g.vc, g.node)
