"""CPUs and memory of running opportunistic jobs, which Slurm requeues for a job of a QOS that preempts
them (preempt/qos), as recorded on the lab (tests/fixtures/slurm/preempt_qos_node_resources.txt)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest
from controller_support import NOTICE_CONFIG
from decide_support import NOW, context, decided, make_round, row

from hivebatch.controller.context import load_context
from hivebatch.controller.decide.fit import node_needs, node_rooms, why_unfit
from hivebatch.controller.decide.unstarted import take_back_unstarted
from hivebatch.controller.observe import count_running_jobs
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob, SlurmNode


def _node(**kw: object) -> SlurmNode:
    """node3 with its 16 CPUs and 64000 MB held by opportunistic jobs (``held``: by others)."""
    base = SlurmNode(name="node3", state="MIXED", bad=False, gpu_indices=list(range(8)), partitions=["gpu"],
                     cpus=16, cpus_free=0, mem_mb=64000, mem_free_mb=0, preemptible_cpus=16,
                     preemptible_mem_mb=64000)  # fmt: skip
    return replace(base, **kw)


def _job(qos: str, cpus: int = 4, mem: int = 1000, **kw: object) -> SlurmJob:
    base = SlurmJob(job_id=9, name="j", user="alice", account="cv", qos=qos, state="PENDING", reason="",
                    partition="gpu", cpus_per_node=cpus, cpus_total=cpus, mem_per_node_mb=mem)  # fmt: skip
    return replace(base, **kw)


@pytest.mark.parametrize(
    ("node", "job", "why"),
    [
        # case 1: a normal job of 4 CPUs started at once where an opportunistic one held all 16
        (_node(), _job("normal"), None),
        (_node(), _job("urgent"), None),
        # case 4: another opportunistic job waited (Resources)
        (_node(), _job("opportunistic"), "0 CPUs free, the job needs 4"),
        # case 3: CPUs a normal job holds are not taken back
        (_node(preemptible_cpus=6, preemptible_mem_mb=30000), _job("normal", cpus=8), "6 CPUs free, the job needs 8"),
        # case 2: memory too
        (_node(cpus_free=15, preemptible_cpus=1, mem_free_mb=4000, preemptible_mem_mb=60000), _job("normal", 1, 10000),
         None),
        (_node(cpus_free=15, preemptible_cpus=0, mem_free_mb=4000, preemptible_mem_mb=0), _job("normal", 1, 10000),
         "4000 MB memory free, the job needs 10000"),
        # a QOS hivebatch did not give Preempt=opportunistic
        (_node(), _job("site-debug"), "0 CPUs free, the job needs 4"),
    ],
)  # fmt: skip
def test_a_job_that_preempts_opportunistic_ones_counts_what_they_hold_as_free(
    node: SlurmNode, job: SlurmJob, why: str | None
) -> None:
    assert why_unfit(job, node) == why


def test_the_cpus_and_memory_of_running_opportunistic_jobs_are_counted() -> None:
    nodes = {n: _node(name=n, preemptible_cpus=0, preemptible_mem_mb=0) for n in ("node3", "node4")}
    jobs = [
        _job("opportunistic", 8, 0, state="RUNNING", nodes=["node3"], mem_per_cpu_mb=2000),
        _job("opportunistic", 16, 20000, state="RUNNING", nodes=["node3", "node4"]),
        _job("opportunistic", 2, 0, state="RUNNING", nodes=["node4"], whole_node_memory=True),
        _job("normal", 4, 1000, state="RUNNING", nodes=["node3"]),
        _job("opportunistic", 4, 1000),  # pending
    ]
    count_running_jobs(jobs, nodes)
    assert [(nodes[n].preemptible_cpus, nodes[n].preemptible_mem_mb) for n in ("node3", "node4")] == [
        (8 + 8, 16000 + 20000),
        (8 + 2, 20000 + 64000),
    ]


def test_jobs_pinned_in_one_round_share_out_what_the_opportunistic_jobs_hold() -> None:
    held = {"node3": _node(preemptible_cpus=8, cpus_free=0)}
    # the first job of 4 CPUs takes 4 of the 8, the second 4 more; nothing is left for a third
    room = node_rooms(held, [(_job("normal"), ["node3"])] * 2)["node3"]
    assert room.preemptible_cpus == 0 and not room.fits(node_needs(_job("normal")))
    room = node_rooms(held, [(_job("normal"), ["node3"])])["node3"]
    assert room.fits(node_needs(_job("normal"))) and not room.fits(node_needs(_job("opportunistic")))


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return context(Path(tmp_path_factory.mktemp("preempted_resources")))


def test_a_guaranteed_job_is_placed_where_opportunistic_jobs_hold_every_cpu(ctx) -> None:  # type: ignore[no-untyped-def]
    held = {"cpus_free": 0, "preemptible_cpus": 16, "mem_free_mb": 0, "preemptible_mem_mb": 64000}
    r = decided(ctx, JobRequest(vc="cv", gpus=1), nodes_kw=held, qos="normal", cpus_per_node=4)
    assert [p.job.slurm_job_id for p in r.out.places] == [1]
    r = decided(ctx, JobRequest(vc="cv", gpus=1, qos="opportunistic"), nodes_kw=held, qos="opportunistic",
                cpus_per_node=4)  # fmt: skip
    assert not r.out.places


@pytest.fixture(scope="module")
def notice_ctx(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cfg = tmp_path_factory.mktemp("notice") / "hivebatch.yaml"
    cfg.write_text(NOTICE_CONFIG)  # the default notice, 120 s
    return load_context(cfg)


def _pinned_round(ctx, qos: str, waited_s: float, **node_kw: object):  # type: ignore[no-untyped-def]
    """Job 1 pinned to node3 ``waited_s`` ago and not started (Resources), node3 as ``node_kw`` says."""
    pinned = row(1, JobRequest(vc="cv", gpus=1, qos=qos), state="placed", placement={"node3": [0]},
                 gres="gpu:g0:1", placed_at=NOW - dt.timedelta(seconds=waited_s))  # fmt: skip
    r = make_round(ctx, [pinned])
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], held=False, reason="Resources", qos=qos)
    r.ledger.nodes = {"node3": _node(**node_kw)}
    r.alloc.adopt("1", "cv", 0 if qos != "opportunistic" else -1, pinned.placement)
    return r


@pytest.mark.parametrize(
    ("qos", "waited_s", "node_kw", "taken_back"),
    [
        # Slurm gives the opportunistic jobs their notice (GraceTime) before it starts the pin: the
        # bound (300 s) is longer by that notice (120 s by default: preempt_grace.txt)
        ("normal", 310, {}, False),
        ("normal", 425, {}, True),
        # no opportunistic job holds anything there: the plain bound
        ("normal", 310, {"cpus_free": 16, "preemptible_cpus": 0, "mem_free_mb": 64000, "preemptible_mem_mb": 0}, True),
        # an opportunistic pin preempts nobody
        ("opportunistic", 310, {"cpus_free": 16, "mem_free_mb": 64000}, True),
    ],
)  # fmt: skip
def test_a_pin_waits_out_the_notice_slurm_gives_the_opportunistic_jobs_it_requeues(
    notice_ctx, qos: str, waited_s: float, node_kw: dict[str, object], taken_back: bool
) -> None:  # type: ignore[no-untyped-def]
    r = _pinned_round(notice_ctx, qos, waited_s, **node_kw)
    take_back_unstarted(r)
    assert bool(r.out.take_backs) == taken_back, [t.why for t in r.out.take_backs]
    if taken_back:
        within = "420 s (with 120 s of notice to opportunistic jobs there)" if not node_kw else "300 s"
        assert r.out.take_backs[0].why.startswith(f"Slurm did not start it within {within} on node3")
