"""A job on as many nodes as its tasks need, as Slurm spreads it (hivebatch.controller.decide.spread)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from decide_support import context, decided

from hivebatch.controller.decide.spread import (
    FEWER_TASKS,
    NodeShare,
    NodeSize,
    node_share,
    nodes_for_tasks,
    spread_over_nodes,
)
from hivebatch.request import JobRequest
from hivebatch.slurm.parse import parse_squeue_json
from hivebatch.slurm.types import SlurmJob

NODES = ("node1", "node2", "node3", "node4")
SIXTEEN = NodeSize(cpus=16, mem_mb=64000)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):
    return context(tmp_path_factory.mktemp("spread"))


def test_a_per_node_ask_without_a_node_count_runs_on_the_nodes_its_cpus_need(ctx) -> None:  # type: ignore[no-untyped-def]
    # `sbatch -n 32 --gres=gpu:2`: plain Slurm ran it on several nodes with 2 GPUs on each; pinned to
    # one node it was found never runnable, held again and placed again every cycle
    r = decided(ctx, JobRequest(vc="nlp", gpus=2, gpus_per_node=2, nodes=1), cpus_total=32, tasks=32)
    (place,) = r.out.places
    assert sorted(len(g) for g in place.placement.values()) == [2, 2] and place.shape == (2, 2)
    assert place.note == (
        "runs on 2 nodes with 2 GPU(s) each: its 32 CPUs need 2 nodes of at most 16 CPUs each, as Slurm spreads it"
    )


def test_tasks_per_node_spread_the_job_as_slurm_does(ctx) -> None:  # type: ignore[no-untyped-def]
    # `-n 8 --ntasks-per-node=4 --gres=gpu:1`: 8 CPUs fit on one node, but at most 4 tasks go on each
    r = decided(
        ctx, JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), cpus_total=8, tasks=8, tasks_per_node=4
    )
    (place,) = r.out.places
    assert place.shape == (2, 1) and len(place.placement) == 2
    assert "its 8 tasks, at most 4 on a node (--ntasks-per-node), need 2 nodes" in (place.note or "")


def test_memory_per_cpu_spreads_the_tasks_as_slurm_does(ctx) -> None:  # type: ignore[no-untyped-def]
    # `-n 16 --mem-per-cpu=5000 --gres=gpu:1`: 16 CPUs fit one node, their 80000 MB do not; plain Slurm
    # ran 8 tasks on each of two nodes, one GPU each (tests/fixtures/slurm/tasks_spread_over_nodes.txt)
    asks = {
        "cpus_total": 16,
        "tasks": 16,
        "cpus_per_node": 1,
        "mem_per_node_mb": 5000,
        "mem_per_cpu_mb": 5000,
    }
    r = decided(ctx, JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), **asks)
    (place,) = r.out.places
    assert place.shape == (2, 1) and len(place.placement) == 2
    assert "its 16 tasks of 5000 MB memory (--mem-per-cpu) need 2 nodes of at most 64000 MB each" in (
        place.note or ""
    )
    # the lab's default 2000 MB per CPU leaves them on one node
    r = decided(
        ctx, JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), **{**asks, "mem_per_cpu_mb": 2000}
    )
    (place,) = r.out.places
    assert place.shape == (1, 1)


def test_an_overcommitted_job_runs_as_if_one_task_ran_on_each_node(ctx) -> None:  # type: ignore[no-untyped-def]
    # `-n 64 -c 2 --mem-per-cpu=5000 -O --gres=gpu:1`: plain Slurm ran all 64 tasks on one node with
    # two CPUs (tests/fixtures/slurm/overcommit.txt); squeue's cpus is then the node count
    asks = {
        "cpus_total": 1,
        "tasks": 64,
        "cpus_per_node": 2,
        "mem_per_node_mb": 10000,
        "mem_per_cpu_mb": 5000,
    }
    assert SlurmJob(1, "j", "alice", "nlp", "normal", "PENDING", "None", **asks).overcommitted
    r = decided(ctx, JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), **asks)
    (place,) = r.out.places
    assert place.shape == (1, 1) and not place.note
    # without -O each of its 64 tasks holds two CPUs and their 10000 MB: 6 tasks on a node, 11 nodes
    plain = {**asks, "cpus_total": 128}
    assert not SlurmJob(1, "j", "alice", "nlp", "normal", "PENDING", "None", **plain).overcommitted
    assert (
        nodes_for_tasks(SlurmJob(1, "j", "alice", "nlp", "normal", "PENDING", "None", **plain), SIXTEEN)[0]
        == 11
    )


def test_a_per_job_count_is_split_evenly_over_the_nodes(ctx) -> None:  # type: ignore[no-untyped-def]
    r = decided(ctx, JobRequest(vc="nlp", gpus=4), cpus_total=32, tasks=32)
    (place,) = r.out.places
    assert place.shape == (2, 2)


@pytest.mark.parametrize(("gpus", "shape"), [(3, (2, 2)), (1, (2, 1))])
def test_a_per_job_count_that_does_not_split_evenly_is_rounded_up_as_the_plugin_does(
    ctx, gpus: int, shape: tuple[int, int]
) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm put `-n 32 --gpus=3` on 4 nodes with a GPU each and its srun failed
    # (tests/fixtures/slurm/tasks_spread_over_nodes.txt); hivebatch runs it on the same GPUs per node
    r = decided(ctx, JobRequest(vc="nlp", gpus=gpus), cpus_total=32, tasks=32)
    (place,) = r.out.places
    assert place.shape == shape
    total = shape[0] * shape[1]
    assert f"runs on 2 nodes with {shape[1]} GPU(s) each ({total} in all for the {gpus} it asks" in (
        place.note or ""
    )


@pytest.mark.parametrize(
    ("req", "asks", "why"),
    [
        # the owner's own node count cannot hold the tasks (Slurm refuses `-N 1 -n 32` at submit)
        (
            JobRequest(vc="nlp", gpus=2, gpus_per_node=2, nodes=1),
            {"cpus_total": 32, "max_nodes": 1},
            "its 32 CPUs need 2 nodes of at most 16 CPUs each, and it asks for at most 1 (-N): cancel it and"
            " submit it again with -N 2 or with fewer tasks or CPUs",
        ),
        # cv has one whole-node cell: a job on two nodes never fits in its cells
        (
            JobRequest(vc="cv", gpus=2, gpus_per_node=2, nodes=1),
            {"cpus_total": 32},
            "its 32 CPUs need 2 nodes of at most 16 CPUs each, and a job on several nodes runs in whole-node"
            " cells, of which virtual cluster cv has 1: ask for fewer tasks or CPUs (-n, -c, --ntasks-per-node), or"
            " submit it with --qos=opportunistic to run on idle GPUs",
        ),
        (
            JobRequest(vc="nlp", gpus=20, qos="opportunistic"),
            {"cpus_total": 32, "max_nodes": 2},  # -N 1-2
            "its 32 CPUs need 2 nodes of at most 16 CPUs each, and its 20 GPUs on at most 2 nodes need more"
            " than the 8 a node holds for it: ask for fewer GPUs",
        ),
        (
            JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1),
            {"cpus_total": 48, "tasks": 48},
            "its 48 CPUs need 3 nodes of at most 16 CPUs each, and a job on several nodes runs in whole-node"
            " cells, of which virtual cluster nlp has 2: ask for fewer tasks or CPUs (-n, -c, --ntasks-per-node), or"
            " submit it with --qos=opportunistic to run on idle GPUs",
        ),
    ],
)
def test_a_job_whose_tasks_its_nodes_cannot_hold_is_rejected_saying_what_to_change(
    ctx, req, asks, why
) -> None:  # type: ignore[no-untyped-def]
    r = decided(ctx, req, **asks)
    (wait,) = r.out.waits
    assert wait.rejected and wait.reason == f"can never run as asked: {why}"
    assert not r.out.places


def test_a_job_whose_tasks_fit_is_left_as_asked(ctx) -> None:  # type: ignore[no-untyped-def]
    spec = ctx.spec
    sj = SlurmJob(
        job_id=1, name="j", user="u", account="nlp", qos="normal", state="PENDING", reason="", cpus_total=16
    )
    req = JobRequest(vc="nlp", gpus=2, gpus_per_node=2, nodes=1)
    assert spread_over_nodes(req, sj, SIXTEEN, spec) == (req, None, None)
    assert spread_over_nodes(req, replace(sj, cpus_total=32), NodeSize(), spec) == (
        req,
        None,
        None,
    )  # CPUs unknown
    # an owner's range allows more nodes: `-N 1-3 -n 32`
    wide, note, never = spread_over_nodes(req, replace(sj, cpus_total=32, max_nodes=3), SIXTEEN, spec)
    assert never is None and (wide.nodes, wide.gpus) == (2, 4) and note


def test_squeue_gives_tasks_per_node_and_the_owners_node_bound(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_tasks_spread.json"))}
    loose, per_node, fixed = jobs[3702], jobs[3703], jobs[3704]  # recorded on the lab, held
    assert (loose.tasks, loose.cpus_total, loose.max_nodes) == (32, 32, 0)
    assert loose.mem_per_cpu_mb == 2000  # the lab's DefMemPerCPU, which squeue lists as the job's
    assert nodes_for_tasks(loose, SIXTEEN)[0] == 2
    assert (per_node.tasks, per_node.tasks_per_node) == (16, 4) and nodes_for_tasks(per_node, SIXTEEN)[0] == 4
    assert fixed.max_nodes == 1


def test_a_task_larger_than_any_node_is_not_spread(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    # `-c 500`: a task runs on one node; plain Slurm accepts it and never starts it (PartitionConfig,
    # held_impossible_accepted.txt), and the controller rejects it as no node has its CPUs
    loose = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_tasks_spread.json"))}[3702]
    one_big_task = replace(loose, tasks=1, cpus_total=500, cpus_per_node=500)
    assert nodes_for_tasks(one_big_task, SIXTEEN) == (1, "", FEWER_TASKS)
    two_big_tasks = replace(loose, tasks=2, cpus_total=64, cpus_per_node=32)
    assert nodes_for_tasks(two_big_tasks, SIXTEEN)[0] == 1


GPUS_WITH_CPUS = 'hivebatch:v2:{"cpus_per_gpu":12,"gpus":2,"qos":"normal","vc":"nlp"}'


def test_cpus_asked_per_gpu_spread_a_per_job_count_with_its_share_on_each_node(ctx) -> None:  # type: ignore[no-untyped-def]
    # `--gpus=2 --cpus-per-gpu=12` on 16-CPU nodes: plain Slurm ran a GPU and 12 CPUs on each of two
    # nodes; the plugin had asked 24 CPUs on one node (MinCPUsNode), which no node has
    r = decided(ctx, JobRequest(vc="nlp", gpus=2), cpus_per_node=24, admin_comment=GPUS_WITH_CPUS)
    (place,) = r.out.places
    assert place.shape == (2, 1)
    assert "the CPUs and memory it asks per GPU fit 1 of its 2 GPUs on a node" in (place.note or "")


def test_a_job_its_memory_per_gpu_spreads_beyond_its_vcs_cells_is_told_to_ask_less_per_gpu(ctx) -> None:  # type: ignore[no-untyped-def]
    # seen on the lab: alice's `--gpus=2 --mem-per-gpu=40G` (plain Slurm ran it on two nodes) was told to
    # ask for fewer tasks or CPUs, which it had not asked for
    comment = 'hivebatch:v2:{"gpus":2,"mem_per_gpu_mb":40960,"qos":"normal","vc":"cv"}'
    r = decided(ctx, JobRequest(vc="cv", gpus=2), mem_per_node_mb=81920, admin_comment=comment)
    (wait,) = r.out.waits
    assert wait.rejected and wait.reason.startswith(
        "can never run as asked: the CPUs and memory it asks per GPU fit 1 of its 2 GPUs on a node, and a job on"
        " several nodes runs in whole-node cells, of which virtual cluster cv has 1: ask for fewer CPUs or less"
        " memory per GPU (--cpus-per-gpu, --mem-per-gpu), or submit it with --qos=opportunistic"
    ), wait.reason


def test_the_pin_gives_each_node_its_share_of_the_cpus_asked_per_gpu() -> None:
    sj = SlurmJob(job_id=1, name="j", user="u", account="nlp", qos="normal", state="PENDING", reason="",
                  cpus_per_node=24, admin_comment=GPUS_WITH_CPUS)  # fmt: skip
    assert node_share({"node1": [0], "node2": [0]}, sj) == NodeShare(cpus=12)
    assert node_share({"node1": [0, 1]}, sj) == NodeShare()  # as the plugin counted it
    assert node_share({"node1": [0]}, replace(sj, admin_comment="")) == NodeShare()


def test_the_pin_keeps_whole_tasks_on_each_node_of_a_job_asking_gpus_per_task() -> None:
    # `-n 16 --gpus-per-task=1` on 2 x 8 GPUs: Slurm laid out 15 + 1 tasks and the job's srun failed
    # ("More processors requested than permitted"); TasksPerNode=8 lays out 8 + 8
    comment = (
        'hivebatch:v2:{"gpus":16,"gpus_per_task":1,"gpus_per_node":8,"nodes":2,"qos":"normal","vc":"nlp"}'
    )
    sj = SlurmJob(job_id=1, name="j", user="u", account="nlp", qos="normal", state="PENDING", reason="",
                  tasks=16, admin_comment=comment)  # fmt: skip
    two = {"node1": list(range(8)), "node2": list(range(8))}
    assert node_share(two, sj) == NodeShare(tasks=8)
    assert node_share(two, replace(sj, tasks_per_node=8)) == NodeShare()  # pinned before
    assert node_share({"node1": list(range(8))}, sj) == NodeShare()


def test_scontrol_sets_the_cpus_and_memory_of_each_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from hivebatch.slurm.cli import CliBackend

    calls: list[list[str]] = []
    backend = CliBackend()
    monkeypatch.setattr(backend, "_run", lambda args, **kw: calls.append(args) or "")
    backend.update_pending(7, nodelist=["node1", "node2"], num_nodes=2, gres="gpu:g0:1", min_cpus_per_node=12,
                           min_mem_per_node_mb=4000, tasks_per_node=3)  # fmt: skip
    assert calls == [["scontrol", "update", "JobId=7", "Gres=gpu:g0:1", "NodeList=node1,node2", "NumNodes=2-2",
                      "MinCPUsNode=12", "MinMemoryNode=4000", "TasksPerNode=3"]]  # fmt: skip


def test_gpus_per_task_spread_with_whole_tasks_on_each_node(ctx) -> None:  # type: ignore[no-untyped-def]
    # `-n 3 -c 8 --gpus-per-task=2` on 16-CPU nodes: Slurm puts 2 + 1 tasks on two nodes, so each
    # node needs the GPUs of two tasks (as 3 + 3 the job's srun failed: gpus_per_task_over_nodes.txt)
    comment = 'hivebatch:v2:{"gpus":6,"gpus_per_task":2,"qos":"normal","vc":"nlp"}'
    r = decided(ctx, JobRequest(vc="nlp", gpus=6), cpus_total=24, tasks=3, admin_comment=comment)
    (place,) = r.out.places
    assert place.shape == (2, 4)
    assert (place.note or "").startswith("runs on 2 nodes with 4 GPU(s) each (8 in all for the 6 it asks")


def test_gpus_per_task_spread_so_that_each_nodes_share_of_tasks_fits_its_cpus(ctx) -> None:  # type: ignore[no-untyped-def]
    # `-n 5 -c 6 --gpus-per-task=2` placed by the plugin as 2 x 6 GPUs: 30 CPUs fit two 16-CPU nodes,
    # but the pin's TasksPerNode=3 asks 18 on each, and Slurm would hold the job again every cycle
    comment = 'hivebatch:v2:{"gpus":12,"gpus_per_node":6,"gpus_per_task":2,"nodes":2,"qos":"opportunistic","vc":"nlp"}'
    req = JobRequest(vc="nlp", qos="opportunistic", gpus=12, nodes=2, gpus_per_node=6)
    r = decided(ctx, req, cpus_total=30, tasks=5, admin_comment=comment)
    (place,) = r.out.places
    assert place.shape == (3, 4)  # 2 + 2 + 1 tasks, 12 CPUs at most on a node
    assert "its 5 tasks of 6 CPUs need 3 nodes of at most 16 CPUs each" in (place.note or "")


def test_squeue_gives_the_jobs_nice_an_admins_negative_one_included(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    jobs = {j.name: j for j in parse_squeue_json(slurm_fixture("squeue_nice.json"))}
    assert (jobs["nice100"].nice, jobs["nice0"].nice, jobs["admin"].nice) == (100, 0, -50)


@pytest.mark.parametrize(
    ("req", "asks", "shape"),
    [
        # idle GPUs reach all four nodes: one task on each, as plain Slurm ran it (spread_job.txt)
        (JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1, qos="opportunistic"), {}, (4, 1)),
        # nlp spans its two whole-node cells; the owner's -N 1-2 bounds it too
        (JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), {}, (2, 1)),
        (
            JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1, qos="opportunistic"),
            {"max_nodes": 2},
            (2, 1),
        ),
        # cv has one whole-node cell: it stays on one node, as Slurm does where one node is all it may use
        (JobRequest(vc="cv", gpus=1, gpus_per_node=1, nodes=1), {}, (1, 1)),
        # a --gpus total is split over the nodes as any spread one
        (JobRequest(vc="nlp", gpus=4, qos="opportunistic"), {}, (4, 1)),
    ],
)
def test_spread_job_runs_on_as_many_nodes_as_it_may_use(ctx, req, asks, shape) -> None:  # type: ignore[no-untyped-def]
    r = decided(ctx, req, cpus_total=4, tasks=4, spread_job=True, **{"max_nodes": 4, **asks})
    (place,) = r.out.places
    assert place.shape == shape
    assert ("--spread-job puts its 4 tasks on as many nodes as it may use" in (place.note or "")) == (
        shape[0] > 1
    )


def test_squeue_says_which_job_asked_to_be_spread(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    jobs = {j.name: j for j in parse_squeue_json(slurm_fixture("squeue_spread_job.json"))}
    assert (jobs["spread"].spread_job, jobs["spread"].max_nodes) == (True, 4)
    assert (jobs["plain"].spread_job, jobs["plain"].max_nodes) == (False, 0)


def test_tasks_are_spread_by_the_cpus_their_partition_lets_a_job_use(ctx) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm ran `srun -p small -n 16 --gres=gpu:2` with 8 tasks and GPUs 0,1 on each of two nodes,
    # MaxCPUsPerNode=8; pinned to one node it was held again as BadConstraints (partition_max_cpus.txt)
    req = JobRequest(vc="nlp", gpus=2, gpus_per_node=2, nodes=1)
    caps = {"partitions": ["gpu", "small"], "max_cpus": {"small": 8}}
    r = decided(ctx, req, nodes_kw=caps, partition="small", cpus_total=16, tasks=16)
    (place,) = r.out.places
    assert place.shape == (2, 2)
    assert place.note == (
        "runs on 2 nodes with 2 GPU(s) each: its 16 CPUs need 2 nodes of at most 8 CPUs each, as Slurm spreads it"
    )
    # the same job in the partition without a cap fits one node
    r = decided(ctx, req, nodes_kw=caps, partition="gpu", cpus_total=16, tasks=16)
    (place,) = r.out.places
    assert place.shape == (1, 2)


def test_tasks_are_spread_by_the_memory_their_partition_lets_a_job_use(ctx) -> None:  # type: ignore[no-untyped-def]
    # plain Slurm ran `-n 16 --mem-per-cpu=3000 --gres=gpu:1` on two nodes with MaxMemPerNode=30000
    # (48000 MB fit one 64000 MB node, not the 30000 a job gets there: partition_max_mem.txt)
    asks = {"partition": "p", "cpus_total": 16, "tasks": 16, "cpus_per_node": 1, "mem_per_cpu_mb": 3000}
    caps = {"partitions": ["gpu", "p"], "max_mem_mb": {"p": 30000}}
    r = decided(ctx, JobRequest(vc="nlp", gpus=1, gpus_per_node=1, nodes=1), nodes_kw=caps, **asks)
    (place,) = r.out.places
    assert place.shape == (2, 1)
    assert "its 16 tasks of 3000 MB memory (--mem-per-cpu) need 2 nodes of at most 30000 MB each" in (
        place.note or ""
    )


def test_an_overcommitted_job_is_pinned_by_its_nodes_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # NumNodes made Slurm count its 64 tasks' CPUs again and it never ran (tests/fixtures/slurm/overcommit.txt)
    from controller_support import make_env

    env = make_env(tmp_path)
    jid = env.submit("alice", "cv", 1, extra=["-n", "64", "--overcommit"])
    env.cycle()
    env.cycle()
    assert env.slurm.job(jid).state == "RUNNING" and env.job(jid).state == "running"
    assert env.slurm.job(jid).cpus_total == 1
    (pin,) = [args for _user, kind, args in env.slurm.calls if kind == "update_pending"]
    assert pin[2] is None  # no NumNodes


def test_squeue_tells_an_overcommitted_job_by_its_cpus(slurm_fixture) -> None:  # type: ignore[no-untyped-def]
    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_overcommit.json"))}
    assert jobs[1706].overcommitted and jobs[1707].overcommitted  # -n 64 -O, -n 64 -c 2 -O
    assert not jobs[1708].overcommitted  # -n 16
