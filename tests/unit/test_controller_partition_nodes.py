"""The node counts a job's partitions allow (tests/fixtures/slurm/partition_node_limits.txt)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from decide_support import context, decided

from hivebatch.controller.decide.partition_nodes import (
    NodeRange,
    outside_partition_nodes,
    partition_node_range,
)
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob

LIMITS = {"one": (1, 1), "two": (2, 0)}  # MaxNodes=1; MinNodes=2


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return context(tmp_path_factory.mktemp("pnodes"))


def _job(**kw: object) -> SlurmJob:
    base = SlurmJob(job_id=7, name="j", user="bob", account="nlp", qos="normal", state="PENDING", reason="")
    return replace(base, **kw)


def test_the_loosest_of_the_jobs_partitions_sets_its_node_range() -> None:
    assert partition_node_range(_job(partition="one"), LIMITS) == NodeRange(1, 1, "", "one's MaxNodes is 1")
    assert partition_node_range(_job(partition="two"), LIMITS) == NodeRange(2, 0, "two's MinNodes is 2", "")
    assert partition_node_range(_job(partition="one,gpu"), LIMITS) == NodeRange(
        1, 0, "", "one's MaxNodes is 1"
    )
    assert partition_node_range(_job(partition="gpu"), LIMITS) == NodeRange()


def test_a_node_count_its_partition_never_allows_waits_saying_what_to_change() -> None:
    # plain Slurm left `-N 2` in MaxNodes=1 and `-N 1` in MinNodes=2 pending for ever, PartitionNodeLimit
    assert outside_partition_nodes(_job(partition="one", num_nodes=2, max_nodes=2), LIMITS) == (
        "it needs 2 nodes, more than Slurm allows: partition one's MaxNodes is 1; "
        "lower it (scontrol update job 7 NumNodes=1) or cancel it"
    )
    assert outside_partition_nodes(_job(partition="two", num_nodes=1, max_nodes=1), LIMITS) == (
        "it asks for at most 1 nodes (-N), fewer than Slurm allows: partition two's MinNodes is 2; "
        "raise it (scontrol update job 7 NumNodes=2) or cancel it"
    )
    # Slurm's own count of a job without -N (node_count 2 for -n 32 on 16-CPU nodes)
    assert outside_partition_nodes(_job(partition="one", num_nodes=2), LIMITS) == (
        "it needs 2 nodes, more than Slurm allows: partition one's MaxNodes is 1; "
        "cancel it and submit it again with fewer tasks or CPUs (-n, -c, --ntasks-per-node)"
    )
    # a range that allows the partition's count, and counts within it, run
    for ok in (
        _job(partition="two", num_nodes=1, max_nodes=2),
        _job(partition="two", num_nodes=1),
        _job(partition="one", num_nodes=1, max_nodes=1),
        _job(partition="one,gpu", num_nodes=2, max_nodes=2),
    ):
        assert outside_partition_nodes(ok, LIMITS) is None, ok


def _limits(partition: str) -> dict[str, object]:
    return {"partitions": ["gpu", partition], "node_limits": {partition: LIMITS[partition]}}


@pytest.mark.parametrize(
    ("req", "asks"),
    [
        (JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), {}),  # --gres=gpu:1
        (JobRequest(vc="nlp", gpus=2), {}),  # --gpus=2
        (JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), {"num_nodes": 1, "max_nodes": 2}),  # -N 1-2
    ],
)
def test_a_job_in_a_partition_with_a_fewest_node_count_runs_on_that_many_nodes(
    ctx, req: JobRequest, asks: dict[str, object]
) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm ran --gres=gpu:1, --gpus=2 and -N 1-2 --gres=gpu:1 on two nodes with a GPU on each in
    # MinNodes=2; pinned to one node, each stayed pending, PartitionNodeLimit
    r = decided(ctx, req, nodes_kw=_limits("two"), partition="two", **asks)
    (place,) = r.out.places
    assert place.shape == (2, 1)
    assert "runs on 2 nodes with 1 GPU(s) each: partition two's MinNodes is 2" in (place.note or "")


def test_a_job_whose_tasks_need_more_nodes_than_its_partition_allows_is_rejected(ctx) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm refused `-n 32 --gres=gpu:1` at submit in MaxNodes=1; pinned to two nodes it stayed
    # pending, PartitionNodeLimit, holding its cells
    req = JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1)
    r = decided(ctx, req, nodes_kw=_limits("one"), partition="one", cpus_total=32, tasks=32)
    (wait,) = r.out.waits
    assert wait.rejected and wait.reason == (
        "can never run as asked: its 32 CPUs need 2 nodes of at most 16 CPUs each, and Slurm runs a job on at "
        "most 1 there (partition one's MaxNodes is 1): ask for fewer tasks or CPUs (-n, -c, --ntasks-per-node)"
    )
    r = decided(ctx, req, nodes_kw=_limits("one"), partition="one", cpus_total=16, tasks=16)
    assert [p.shape for p in r.out.places] == [(1, 1)]


def test_a_job_waiting_on_its_partitions_node_limit_holds_no_gpus(ctx) -> None:  # type: ignore[no-untyped-def]
    req = JobRequest(vc="nlp", gpus=2, gpus_per_node=1, nodes=2)  # -N 2 --gres=gpu:1
    r = decided(ctx, req, nodes_kw=_limits("one"), partition="one", num_nodes=2, max_nodes=2)
    assert not r.out.places
    (wait,) = r.out.waits
    assert wait.not_startable and not wait.rejected
    assert wait.reason.startswith("it needs 2 nodes, more than Slurm allows: partition one's MaxNodes is 1")


def test_spread_job_wider_than_its_partition_allows_is_rejected_as_slurm_never_runs_it(ctx) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm left `-n 4 --spread-job` pending for ever in MaxNodes=1 (PartitionNodeLimit)
    req = JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1)
    r = decided(ctx, req, nodes_kw=_limits("one"), partition="one", cpus_total=4, tasks=4, spread_job=True)
    (wait,) = r.out.waits
    assert wait.rejected and not r.out.places
    assert "Slurm runs a job on at most 1 there (partition one's MaxNodes is 1)" in wait.reason
