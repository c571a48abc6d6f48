"""Nodes kept to one user by a partition's ExclusiveUser=YES, as Slurm keeps them on the lab
(tests/fixtures/slurm/partition_exclusive_user.txt)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest
from decide_support import context, decided

from hivebatch.controller.decide.fit import node_needs, node_rooms, why_unfit
from hivebatch.controller.observe import count_running_jobs
from hivebatch.request import JobRequest
from hivebatch.slurm.parse import parse_partitions, parse_sinfo_json
from hivebatch.slurm.types import SlurmJob, SlurmNode

ADMIN = 'hivebatch:v2:{"gpus":1}'  # the plugin's request in a job's admin comment


def _node(name: str = "node4", **kw: object) -> SlurmNode:
    """A lab node in partitions gpu and x (ExclusiveUser=YES); its users' jobs are guaranteed ones unless
    ``firm_users`` says otherwise."""
    base = SlurmNode(name=name, state="MIXED", bad=False, gpu_indices=list(range(8)), partitions=["gpu", "x"],
                     cpus=16, cpus_free=15, mem_mb=64000, mem_free_mb=60000, user_exclusive={"x"})  # fmt: skip
    kw.setdefault("firm_users", set(kw.get("users", ())))  # type: ignore[call-overload]
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
    owned = {"partitions": ["gpu", "x"], "user_exclusive": {"x"}, "owner": "alice", "users": {"alice"},
             "firm_users": {"alice"}}  # fmt: skip
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


# An opportunistic job of an ExclusiveUser partition keeps its node to its user against a guaranteed job,
# and Slurm requeues nothing for it (tests/fixtures/slurm/exclusive_user_opportunistic.txt)


def test_a_user_whose_jobs_on_a_node_are_all_opportunistic_gpu_jobs_yields_it() -> None:
    nodes = {n: _node(n, users=set()) for n in ("node3", "node4")}
    ours = {"admin_comment": ADMIN, "state": "RUNNING"}
    gpu = {"node3": [0]}
    jobs = [
        _job("alice", "x", qos="opportunistic", nodes=["node3"], gpus=gpu, **ours),
        _job("bob", "x", qos="opportunistic", nodes=["node3"], **ours),  # no GPUs
        _job("carol", "x", qos="normal", nodes=["node3"], gpus=gpu, **ours),
        _job("carol", "x", qos="opportunistic", nodes=["node4"], gpus={"node4": [1]}, **ours),
        # the Operator's job, foreign work: the controller does not requeue it
        _job("hbctl", "x", qos="opportunistic", state="RUNNING", nodes=["node4"], gpus={"node4": [2]}),
    ]
    count_running_jobs(jobs, nodes)
    assert nodes["node3"].yielding_users == {"alice"}
    assert nodes["node4"].yielding_users == {"carol"}


@pytest.mark.parametrize(
    ("qos", "why"),
    [
        ("normal", None),
        ("urgent", None),
        # an opportunistic job preempts nobody
        ("opportunistic", "user alice's alone while their job of an ExclusiveUser partition runs there"),
    ],
)
def test_a_guaranteed_job_may_use_a_node_kept_to_a_user_of_opportunistic_jobs(
    qos: str, why: str | None
) -> None:
    node = _node("node3", owner="alice", users={"alice"}, firm_users=set())
    assert why_unfit(_job("bob", "gpu", qos=qos), node) == why
    # where the job's own partition keeps the node to one user, every other user must yield
    node = _node("node3", users={"alice", "carol"}, firm_users={"carol"})
    assert why_unfit(_job("bob", "x", qos="normal"), node) == (
        "user carol's job runs there, and partition x keeps a node to one user (ExclusiveUser)"
    )


@pytest.mark.parametrize("notice_s", [0, 120])
def test_the_opportunistic_jobs_that_keep_a_guaranteed_jobs_node_are_told_to_leave(
    ctx, notice_s: int
) -> None:  # type: ignore[no-untyped-def]
    from decide_support import NODES, NOW, make_round, row

    from hivebatch.controller.decide.classify import classify
    from hivebatch.controller.decide.policy_round import run_policy_round
    from hivebatch.controller.decide.room import screen_hopeless
    from hivebatch.notice import NoticeSettings

    guaranteed = row(1, JobRequest(vc="nlp", gpus=1))
    opportunistic = row(2, JobRequest(vc="cv", gpus=1, qos="opportunistic"), state="running",
                        placement={"node3": [0]})  # fmt: skip
    elsewhere = row(3, JobRequest(vc="cv", gpus=1, qos="opportunistic"), state="running",
                    placement={"node4": [0]})  # fmt: skip
    r = make_round(
        replace(ctx, notice=NoticeSettings(notice_s=notice_s)), [guaranteed, opportunistic, elsewhere]
    )
    for j in (opportunistic, elsewhere):
        assert r.alloc.adopt(str(j.slurm_job_id), "cv", -1, j.placement).result == "placed"
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], user="bob", required_nodes=["node3"])
    for jid, node in ((2, "node3"), (3, "node4")):
        r.ledger.slurm[jid] = replace(r.ledger.slurm[jid], user="alice", qos="opportunistic", partition="x",
                                      state="RUNNING", held=False, nodes=[node], gpus={node: [0]},
                                      admin_comment=ADMIN)  # fmt: skip
    r.ledger.nodes = {n: _node(n, cpus_free=15, users=set()) for n in NODES}
    count_running_jobs(r.ledger.slurm.values(), r.ledger.nodes)
    for n in ("node3", "node4"):
        r.ledger.nodes[n].owner = "alice"
    classify(r)
    screen_hopeless(r)
    run_policy_round(r)
    (place,) = r.out.places
    assert place.job.slurm_job_id == 1 and list(place.placement) == ["node3"]
    assert place.placement["node3"] != [0]  # its cells took none of the opportunistic job's GPUs
    if notice_s:  # the notice a victim of the cells gets, and the job is pinned meanwhile
        assert r.out.notices == {2: (1, NOW + dt.timedelta(seconds=notice_s))} and not r.out.victims
    else:
        assert r.out.victims == {2: 1} and place.preempts == [2]


def test_a_victim_is_told_what_it_leaves() -> None:
    from hivebatch.controller.preemption import what_it_leaves
    from hivebatch.db.models import Job

    victim = Job(slurm_job_id=2, placement={"node3": [0]})
    beside = Job(slurm_job_id=1, placement={"node3": [1]})
    on_it = Job(slurm_job_id=1, placement={"node3": [0, 1]})
    assert what_it_leaves(victim, beside) == "node3, which its ExclusiveUser partition keeps to one user"
    assert what_it_leaves(victim, on_it) == "its GPUs node3:[0]"
    assert what_it_leaves(victim, None) == "its GPUs node3:[0]"


def test_a_pin_waiting_for_such_jobs_to_leave_is_given_their_notice(ctx) -> None:  # type: ignore[no-untyped-def]
    from decide_support import make_round

    from hivebatch.controller.decide.unstarted import grace_on
    from hivebatch.notice import NoticeSettings

    r = make_round(replace(ctx, notice=NoticeSettings(notice_s=120)), [])
    r.ledger.nodes = {"node3": _node("node3", owner="alice", users={"alice"}, firm_users=set())}
    assert grace_on(r, _job("bob", "gpu"), ["node3"]) == 120.0
    assert grace_on(r, _job("bob", "gpu", qos="opportunistic"), ["node3"]) == 0.0
    r.ledger.nodes["node3"].firm_users = {"alice"}  # her guaranteed job: nobody leaves
    assert grace_on(r, _job("bob", "gpu"), ["node3"]) == 0.0


def test_a_requeued_guaranteed_job_resuming_there_tells_them_too(ctx) -> None:  # type: ignore[no-untyped-def]
    from decide_support import NODES, NOW, make_round, row

    from hivebatch.controller.decide.classify import classify
    from hivebatch.controller.decide.resume import resume_requeued

    requeued = row(1, JobRequest(vc="nlp", gpus=1), state="preempted", placement={"node3": [1]},
                   gres="gpu:g1:1", start_time=NOW - dt.timedelta(minutes=5))  # fmt: skip
    opportunistic = row(2, JobRequest(vc="cv", gpus=1, qos="opportunistic"), state="running",
                        placement={"node3": [0]})  # fmt: skip
    r = make_round(ctx, [requeued, opportunistic])
    assert r.alloc.adopt("2", "cv", -1, opportunistic.placement).result == "placed"
    r.ledger.slurm[1] = replace(r.ledger.slurm[1], user="bob")
    r.ledger.slurm[2] = replace(r.ledger.slurm[2], user="alice", qos="opportunistic", partition="x",
                                state="RUNNING", held=False, nodes=["node3"], gpus={"node3": [0]},
                                admin_comment=ADMIN)  # fmt: skip
    r.ledger.nodes = {n: _node(n, cpus_free=15, users=set()) for n in NODES}
    count_running_jobs(r.ledger.slurm.values(), r.ledger.nodes)
    r.ledger.nodes["node3"].owner = "alice"
    classify(r)
    resume_requeued(r)
    (place,) = r.out.places
    assert place.placement == {"node3": [1]} and place.resumed
    assert r.out.victims == {2: 1}
