"""Workload generators, trace importers and the quota pool of the simulator."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.sim.quota import QuotaPool
from hivebatch.sim.traces import gpus_from_tres, read_philly, read_sacct, read_tiresias, read_vcs
from hivebatch.sim.workload import CLASSES, PAPER_MODELS, paper_workload, synthetic_trace

VCS = {"a": 8, "b": 6, "c": 2}


def test_paper_workload_is_seeded_and_within_ranges() -> None:
    one = paper_workload(10, 24, seed=7, vc_gpus=VCS)
    two = paper_workload(10, 24, seed=7, vc_gpus=VCS)
    other = paper_workload(10, 24, seed=8, vc_gpus=VCS)
    assert one == two
    assert one != other
    assert 150 < len(one) < 330  # Poisson(240)
    assert all(0 <= j.arrival < 24 * 3600 for j in one)
    assert [j.arrival for j in one] == sorted(j.arrival for j in one)
    assert {j.model for j in one} == set(PAPER_MODELS)
    assert {j.cls for j in one} <= set(CLASSES)
    assert all(j.gpus <= VCS[j.vc] for j in one)
    urgent = sum(j.cls == "urgent" for j in one) / len(one)
    normal = sum(j.cls == "normal" for j in one) / len(one)
    assert urgent < 0.15 and 0.45 < normal < 0.75


def test_synthetic_trace_size_and_determinism() -> None:
    a = synthetic_trace(500, seed=1, vc_gpus=VCS)
    assert len(a) == 500 and a == synthetic_trace(500, seed=1, vc_gpus=VCS)
    assert all(j.is_trace_job and j.duration_s and j.gpus <= VCS[j.vc] for j in a)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_philly_skips_unknown_vcs_and_too_large_jobs(tmp_path: Path) -> None:
    trace = _write(
        tmp_path,
        "t.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-09-29 07:58:42,100.0,1,100.0,a\n"
        "2017-09-29 07:58:32,50.0,8,400.0,b\n"  # 8 GPUs > b's 6
        "2017-09-29 07:59:32,50.0,2,100.0,zz\n"  # unknown VC
        "2017-09-29 08:00:32,70.0,2,140.0,c\n",
    )
    jobs, report = read_philly(trace, VCS)
    assert [(j.vc, j.gpus, j.arrival, j.duration_s) for j in jobs] == [
        ("a", 1, 0.0, 100.0),
        ("c", 2, 110.0, 70.0),
    ]
    assert report.rows == 4 and report.used == 2
    assert report.skipped == {"larger than its VC": 1, "VC not in the VC list": 1}
    assert "2 of 4 trace jobs used" in report.summary()


def test_philly_bad_timestamp_is_one_clear_error(tmp_path: Path) -> None:
    trace = _write(tmp_path, "t.csv", "timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,1,1,1,a\n")
    with pytest.raises(HivebatchError, match="line 2: timestamp"):
        read_philly(trace, VCS)


def test_missing_columns_named(tmp_path: Path) -> None:
    trace = _write(tmp_path, "t.csv", "when,duration\n1,2\n")
    with pytest.raises(HivebatchError, match="missing column"):
        read_philly(trace, VCS)


def test_vcs_file(tmp_path: Path) -> None:
    assert read_vcs(_write(tmp_path, "v.csv", "vc,nodes\nx,4\ny,2\n")) == {"x": 4, "y": 2}
    with pytest.raises(HivebatchError, match="positive whole number"):
        read_vcs(_write(tmp_path, "w.csv", "vc,nodes\nx,-1\n"))


def test_tiresias_keeps_model_names(tmp_path: Path) -> None:
    trace = _write(
        tmp_path,
        "t.csv",
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "0,1,10,606,vgg19,164,30\n1,2,40,133,resnet50,147,23\n",
    )
    jobs, report = read_tiresias(trace, {"only": 4})
    assert [(j.job_id, j.vc, j.model, j.arrival, j.duration_s) for j in jobs] == [
        ("ti0", "only", "vgg19", 0.0, 164.0),
        ("ti1", "only", "resnet50", 30.0, 147.0),
    ]
    assert report.used == 2


def test_sacct_history(tmp_path: Path) -> None:
    trace = _write(
        tmp_path,
        "h.txt",
        "JobIDRaw|Account|QOS|Submit|Start|End|ElapsedRaw|AllocTRES|State\n"
        "11|a|urgent|2026-01-01T10:00:00|2026-01-01T10:01:00|2026-01-01T11:01:00|3600|cpu=4,gres/gpu=2,node=1|COMPLETED\n"
        "11.batch|a||2026-01-01T10:00:00|||3600|cpu=4|COMPLETED\n"
        "12|b|opportunistic|2026-01-01T10:30:00|Unknown|Unknown|0|gres/gpu=1|CANCELLED\n"
        "13|b|opportunistic|2026-01-01T10:30:00|2026-01-01T10:31:00|2026-01-01T10:41:00|600|gres/gpu:v100=1|COMPLETED\n"
        "14|c|normal|2026-01-01T10:40:00|2026-01-01T10:41:00|2026-01-01T10:42:00|60|cpu=1,mem=1G|COMPLETED\n",
    )
    jobs, report = read_sacct(trace, VCS)
    assert [(j.job_id, j.vc, j.cls, j.gpus, j.arrival, j.opportunistic) for j in jobs] == [
        ("sa11", "a", "urgent", 2, 0.0, False),
        ("sa13", "b", jobs[1].cls, 1, 1800.0, True),
    ]
    assert report.skipped == {"job step, not a job": 1, "never ran": 1, "no GPUs": 1}
    assert gpus_from_tres("billing=2,gres/gpu=4") == 4 and gpus_from_tres("cpu=1") == 0


def _nodes(n: int, gpus: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(name=f"n{i}", gpu_type="G", gpu_indices=list(range(gpus))) for i in range(n)]


def _req(job: str, vc: str, gpus: int) -> SimpleNamespace:
    return SimpleNamespace(job_id=job, vc=vc, gpus=gpus, nodes=None, gpu_type=None)


def test_quota_pool_limits_by_count_and_spreads_when_fragmented() -> None:
    pool = QuotaPool(_nodes(2, 4), {"a": 6, "b": 2})
    assert pool.allocate(_req("j1", "a", 3)).placement == {"n0": [0, 1, 2]}
    assert pool.allocate(_req("j2", "b", 2)).placement == {"n1": [0, 1]}
    # a has 3 of 6 left; the pool has 1 + 2 free GPUs on two nodes: the job spreads
    d = pool.allocate(_req("j3", "a", 3))
    assert d.result == "placed" and d.placement == {"n1": [2, 3], "n0": [3]}
    assert pool.allocate(_req("j4", "a", 1)).result == "waiting"  # a's 6 GPUs in use
    assert pool.try_allocate(_req("j5", "a", 7)).result == "rejected"
    pool.release("j2")
    d = pool.allocate(_req("j6", "b", 1))
    assert d.placement == {"n1": [0]}  # best fit: the node with the fewest free GPUs that holds it


def test_quota_pool_avoids_bad_nodes() -> None:
    pool = QuotaPool(_nodes(2, 4), {"a": 8})
    pool.set_node_bad("n0")
    assert pool.allocate(_req("j1", "a", 4)).placement == {"n1": [0, 1, 2, 3]}
    assert pool.allocate(_req("j2", "a", 1)).reason == "not enough free GPUs in the shared pool"
    pool.set_node_healthy("n0")
    assert pool.allocate(_req("j2", "a", 1)).result == "placed"
