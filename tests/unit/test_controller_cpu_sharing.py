"""CPUs shared in a partition whose OverSubscribe lets jobs share them, as Slurm shares them on the lab
(tests/fixtures/slurm/partition_oversubscribe.txt)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from decide_support import context, decided

from hivebatch.controller.decide.cpu_sharing import cpus_short, row_frees
from hivebatch.controller.decide.fit import node_needs, node_rooms, why_unfit
from hivebatch.controller.observe import count_running_jobs
from hivebatch.request import JobRequest
from hivebatch.slurm.parse import parse_partitions, parse_squeue_json
from hivebatch.slurm.types import SlurmJob, SlurmNode


def _node(rows: int = 3, sharing: tuple[int, ...] = (), other: int = 0, **kw: object) -> SlurmNode:
    """A lab node (16 CPUs) in partitions gpu and p, p letting ``rows`` jobs share a CPU; ``sharing``: the
    CPUs of p's running jobs that share theirs, ``other``: the CPUs of jobs that share none."""
    held = sum(sharing) + other
    free = max(0, 16 - max([other + s for s in sharing] or [other]))
    base = SlurmNode(name="node3", state="MIXED", bad=False, gpu_indices=list(range(8)), partitions=["gpu", "p"],
                     cpus=16, cpus_free=free, mem_mb=64000, mem_free_mb=64000, cpu_rows={"p": rows},
                     shared_cpus={"p": list(sharing)} if sharing else {}, cpus_held=held)  # fmt: skip
    return replace(base, **kw)


def _job(cpus: int, shares: bool = True, partition: str = "p", **kw: object) -> SlurmJob:
    base = SlurmJob(job_id=9, name="j", user="bob", account="nlp", qos="normal", state="PENDING", reason="",
                    partition=partition, cpus_per_node=cpus, cpus_total=cpus, shares_cpus=shares)  # fmt: skip
    return replace(base, **kw)


def test_recorded_partitions_and_jobs_say_who_shares_cpus(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    lines = [
        ln
        for ln in slurm_fixture("partition_oversubscribe.txt").splitlines()
        if ln.startswith("PartitionName=")
    ]
    assert [p.cpu_rows for p in parse_partitions("\n".join(lines))] == [3, 2]  # FORCE:3, then YES:2
    gpu = parse_partitions(slurm_fixture("partition_max_cpus.txt"))[0]
    assert (gpu.name, gpu.cpu_rows) == ("gpu", 1)  # OverSubscribe=NO
    jobs = parse_squeue_json(slurm_fixture("squeue_oversubscribe.json"))
    # two running --oversubscribe jobs, a held one that asked nothing, a held --exclusive one
    assert [(j.job_id, j.shares_cpus) for j in jobs] == [
        (1416, True),
        (1417, True),
        (1418, False),
        (1419, False),
    ]


@pytest.mark.parametrize(
    ("node", "job", "short"),
    [
        # case 1, FORCE:3: Slurm ran three 16-CPU jobs on each 16-CPU node, the seventh waited
        (_node(3, (16,)), _job(16), None),
        (_node(3, (16, 16)), _job(16), None),
        (_node(3, (16, 16, 16)), _job(16),
         "0 CPUs free, even with 3 jobs sharing a CPU as partition p lets them (OverSubscribe), the job needs 16"),
        # case 2, FORCE:2: beside two 10-CPU jobs each row has 6 free, though 12 CPUs of the 32 shares are
        (_node(2, (10, 10)), _job(12),
         "6 CPUs free, even with 2 jobs sharing a CPU as partition p lets them (OverSubscribe), the job needs 12"),
        (_node(2, (10, 10)), _job(6), None),
        # case 3: a job of partition gpu holding all 16 CPUs keeps p's jobs off the node
        (_node(3, (), other=16), _job(8),
         "0 CPUs free, even with 3 jobs sharing a CPU as partition p lets them (OverSubscribe), the job needs 8"),
        # case 4, YES:2: a job of p that shares none keeps a sharing one off its CPUs
        (_node(2, (), other=16), _job(16),
         "0 CPUs free, even with 2 jobs sharing a CPU as partition p lets them (OverSubscribe), the job needs 16"),
        # case 5, YES:2: beside two sharing jobs, a job that shares none finds no CPU free
        (_node(2, (16, 16)), _job(4, shares=False), "0 CPUs free, the job needs 4"),
        # a sharing job asked in p and gpu shares in p
        (_node(3, (16,)), _job(16, partition="gpu,p"), None),
        # ... and only in p: in gpu it shares nothing
        (_node(3, (16,)), _job(16, partition="gpu"), "0 CPUs free, the job needs 16"),
    ],
)  # fmt: skip
def test_a_sharing_job_fits_where_one_row_has_its_cpus_free(
    node: SlurmNode, job: SlurmJob, short: str | None
) -> None:
    assert cpus_short(job, node) == short
    assert why_unfit(job, node) == short


def test_rows_are_packed_biggest_first_within_what_other_jobs_leave() -> None:
    assert row_frees(_node(2, (4, 10, 6)), "p") == [0, 12]  # 10+6 in one row, 4 in the other
    assert row_frees(_node(3, (8,), other=4), "p") == [4, 12, 12]
    assert row_frees(_node(2, (16, 16, 16)), "p") == [0, 0]  # more than the rows hold: never below 0


def test_the_cpus_of_running_sharing_jobs_are_counted_job_by_job() -> None:
    node3, node4 = (_node(3, name=n, cpus_free=16) for n in ("node3", "node4"))
    nodes = {"node3": node3, "node4": node4}
    jobs = [
        _job(16, job_id=1, state="RUNNING", nodes=["node3"]),
        _job(32, job_id=2, state="RUNNING", nodes=["node3", "node4"]),
        _job(4, job_id=3, state="RUNNING", nodes=["node3"], shares=False),
        _job(8, job_id=4, state="RUNNING", nodes=["node3"], partition="gpu"),
        _job(8, job_id=5, state="PENDING"),
    ]
    count_running_jobs(jobs, nodes)
    assert (node3.shared_cpus, node3.cpus_held) == ({"p": [16, 16]}, 44)
    assert (node4.shared_cpus, node4.cpus_held) == ({"p": [16]}, 16)


def test_jobs_pinned_in_one_round_take_rows_as_slurm_fills_them() -> None:
    empty = _node(3, cpus_free=16)
    sharing = _job(16)
    pins = [(sharing, ["node3"])] * 2
    room = node_rooms({"node3": empty}, pins)["node3"]
    # the first took the free CPUs (free in every row), the second one row beside it
    assert (room.cpus_free, room.rows) == (0, {"p": [0, 0, 16]})
    assert room.fits(node_needs(sharing)) and not room.fits(node_needs(_job(1, shares=False)))
    room.take(node_needs(sharing))
    assert not room.fits(node_needs(sharing))
    # a job that shares none takes free CPUs out of every row
    room = node_rooms({"node3": empty}, [(_job(6, shares=False), ["node3"])])["node3"]
    assert (room.cpus_free, room.rows) == (10, {"p": [10, 10, 10]})


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return context(Path(tmp_path_factory.mktemp("sharing")))


def test_a_sharing_job_is_placed_on_nodes_whose_cpus_jobs_already_share(ctx) -> None:  # type: ignore[no-untyped-def]
    # every node runs two 16-CPU jobs of p (FORCE:3): plain Slurm starts a third there (case 1); before
    # hivebatch read OverSubscribe it kept the job waiting, "node3: 0 CPUs free, the job needs 16"
    busy = {"partitions": ["gpu", "p"], "cpu_rows": {"p": 3}, "shared_cpus": {"p": [16, 16]}, "cpus_held": 32,
            "cpus_free": 0}  # fmt: skip
    r = decided(
        ctx, JobRequest(vc="nlp", gpus=1), nodes_kw=busy, partition="p", cpus_per_node=16, shares_cpus=True
    )
    assert [p.job.slurm_job_id for p in r.out.places] == [1]
    r = decided(ctx, JobRequest(vc="nlp", gpus=1), nodes_kw=busy, partition="p", cpus_per_node=16)
    assert not r.out.places
    (wait,) = r.out.waits
    assert "node1: 0 CPUs free, the job needs 16" in wait.reason
