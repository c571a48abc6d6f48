"""Nodes kept to one user by a partition's ExclusiveUser=YES, as Slurm keeps them on the lab
(tests/fixtures/slurm/partition_exclusive_user.txt)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from decide_support import context, decided

from hivebatch.controller.decide.fit import node_needs, node_rooms, why_unfit
from hivebatch.controller.observe import count_running_jobs
from hivebatch.request import JobRequest
from hivebatch.slurm.parse import parse_partitions, parse_sinfo_json
from hivebatch.slurm.types import SlurmJob, SlurmNode


def _node(name: str = "node4", **kw: object) -> SlurmNode:
    """A lab node in partitions gpu and x (ExclusiveUser=YES)."""
    base = SlurmNode(name=name, state="MIXED", bad=False, gpu_indices=list(range(8)), partitions=["gpu", "x"],
                     cpus=16, cpus_free=15, mem_mb=64000, mem_free_mb=60000, user_exclusive={"x"})  # fmt: skip
    return replace(base, **kw)


def _job(user: str, partition: str, **kw: object) -> SlurmJob:
    base = SlurmJob(job_id=9, name="j", user=user, account="hivebatch", qos="normal", state="PENDING",
                    reason="", partition=partition, cpus_per_node=1, cpus_total=1)  # fmt: skip
    return replace(base, **kw)


def test_recorded_partitions_and_nodes_say_who_keeps_a_node(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    (x,) = parse_partitions(slurm_fixture("partition_exclusive_user.txt"))
    assert (x.name, x.exclusive_user) == ("x", True)
    assert not any(p.exclusive_user for p in parse_partitions(slurm_fixture("partition_max_cpus.txt")))
    nodes = parse_sinfo_json(slurm_fixture("sinfo_node_owner.json"))
    assert [(n.name, n.owner) for n in nodes] == [
        ("node1", ""),
        ("node2", ""),
        ("node3", "root"),
        ("node4", "hbctl"),
    ]


@pytest.mark.parametrize(
    ("node", "job", "why"),
    [
        # case 1: root's job of x holds node3; hbctl's job of gpu waited there (Resources)
        (_node("node3", owner="root", users={"root"}), _job("hbctl", "gpu"),
         "user root's alone while their job of an ExclusiveUser partition runs there"),
        (_node("node3", owner="root", users={"root"}), _job("root", "gpu"), None),
        # case 2: hbctl's job of gpu runs on node4; root's job of x waited (Resources), hbctl's own ran
        (_node(users={"hbctl"}), _job("root", "x"),
         "user hbctl's job runs there, and partition x keeps a node to one user (ExclusiveUser)"),
        (_node(users={"hbctl"}), _job("hbctl", "x"), None),
        (_node(users={"hbctl"}), _job("root", "gpu"), None),
        # asked in x and gpu, Slurm may run it in gpu
        (_node(users={"hbctl"}), _job("root", "x,gpu"), None),
    ],
)  # fmt: skip
def test_slurm_starts_no_job_where_another_users_job_keeps_the_node(
    node: SlurmNode, job: SlurmJob, why: str | None
) -> None:
    assert why_unfit(job, node) == why


def test_the_users_of_running_jobs_are_counted_on_each_node() -> None:
    nodes = {n: _node(n) for n in ("node3", "node4")}
    jobs = [
        _job("alice", "x", state="RUNNING", nodes=["node3"]),
        _job("bob", "gpu", state="RUNNING", nodes=["node3", "node4"], cpus_total=2),
        _job("carol", "gpu"),  # pending
    ]
    count_running_jobs(jobs, nodes)
    assert [nodes[n].users for n in ("node3", "node4")] == [{"alice", "bob"}, {"bob"}]


def test_jobs_pinned_in_one_round_keep_a_node_to_their_user() -> None:
    idle = {"node3": _node("node3", cpus_free=16)}
    # alice's job of x pinned there makes the node hers: bob's job of gpu does not fit beside it
    room = node_rooms(idle, [(_job("alice", "x"), ["node3"])])["node3"]
    assert room.owner == "alice"
    assert room.fits(node_needs(_job("alice", "gpu"))) and not room.fits(node_needs(_job("bob", "gpu")))
    # bob's job of gpu pinned there first keeps alice's job of x off it, not her job of gpu
    room = node_rooms(idle, [(_job("bob", "gpu"), ["node3"])])["node3"]
    assert not room.fits(node_needs(_job("alice", "x"))) and room.fits(node_needs(_job("alice", "gpu")))


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return context(Path(tmp_path_factory.mktemp("user_exclusive")))


def test_a_job_is_not_pinned_beside_the_job_that_keeps_a_node_to_its_user(ctx) -> None:  # type: ignore[no-untyped-def]
    # through hivebatch bob's jobs of x were pinned on node3 beside alice's job of x, and waited there
    # holding cells until hers ended
    owned = {"partitions": ["gpu", "x"], "user_exclusive": {"x"}, "owner": "alice", "users": {"alice"}}
    r = decided(ctx, JobRequest(vc="nlp", gpus=1), nodes_kw=owned, partition="x", user="bob")
    assert not r.out.places
    (wait,) = r.out.waits
    assert "node1: user alice's alone while their job of an ExclusiveUser partition runs there" in wait.reason
    r = decided(ctx, JobRequest(vc="nlp", gpus=1), nodes_kw=owned, partition="x", user="alice")
    assert [p.job.slurm_job_id for p in r.out.places] == [1]


def test_jobs_of_two_users_with_the_same_needs_are_judged_each_for_its_user(ctx) -> None:  # type: ignore[no-untyped-def]
    # one round judges jobs of the same needs once: where a node is kept to one user, the user is a need
    from decide_support import NODES, make_round, row

    from hivebatch.controller.decide.classify import classify
    from hivebatch.controller.decide.policy_round import run_policy_round
    from hivebatch.controller.decide.room import screen_hopeless

    jobs = [row(1, JobRequest(vc="nlp", gpus=1)), row(2, JobRequest(vc="nlp", gpus=1))]
    r = make_round(ctx, jobs)
    for jid, user in ((1, "bob"), (2, "alice")):
        r.ledger.slurm[jid] = replace(r.ledger.slurm[jid], user=user, partition="x")
    r.ledger.nodes = {n: _node(n, cpus_free=16, owner="alice", users={"alice"}) for n in NODES}
    classify(r)
    screen_hopeless(r)
    run_policy_round(r)
    assert [p.job.slurm_job_id for p in r.out.places] == [2]
    (wait,) = r.out.waits
    assert wait.job.slurm_job_id == 1 and "user alice's alone" in wait.reason
