"""Parsers on outputs recorded from the lab (Slurm 22.05.8): tests/fixtures/slurm/."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from recorded_sacct import RECORDED_FIELDS

from hivebatch.errors import HivebatchError
from hivebatch.slurm.parse import (
    exit_code_from_status,
    expand_hostlist,
    expand_ranges,
    gpus_in_detail,
    job_from_json,
    node_from_json,
    parse_job_id,
    parse_sacct,
    parse_sinfo_json,
    parse_squeue_json,
    split_gres,
    typed_request,
)


@pytest.fixture
def jobs(slurm_fixture):
    return {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue.json"))}


def test_user_held_job(jobs):
    j = jobs[2]
    assert (j.name, j.user, j.account, j.qos, j.state) == ("heldA", "alice", "cv", "normal", "PENDING")
    assert j.held and j.reason == "JobHeldUser"
    assert j.nodes == [] and j.gpus == {} and j.start_time is None and j.end_time is None
    assert j.comment == 'hivebatch:v1:{"gpus":2,"qos":"normal","vc":"cv"}'
    assert j.submit_time == datetime.fromtimestamp(1795278011, tz=UTC)


def test_admin_hold_and_requeue_hold(jobs):
    assert jobs[5].held and jobs[5].reason == "JobHeldAdmin"
    # squeue --json says JobHeldUser + a description; hivebatch reports what scontrol shows
    assert jobs[6].held and jobs[6].reason == "job_requeued_in_held_state"
    assert jobs[6].required_nodes == ["node2"] and jobs[6].tres_per_node == "gres:gpu:g7:1"
    assert jobs[6].nodes == [] and jobs[6].gpus == {}


def test_running_two_node_job_gpu_indices(jobs):
    j = jobs[3]
    assert j.state == "RUNNING" and not j.held and j.reason == "None"
    assert j.nodes == ["node3", "node4"] and j.num_nodes == 2
    assert j.gpus == {"node3": [0, 1], "node4": [0, 1]}
    assert j.time_limit_s == 30 * 60 and j.qos == "prior" and j.account == "nlp"
    assert j.start_time == datetime.fromtimestamp(1795278012, tz=UTC) and j.end_time is None


def test_running_shard_job(jobs):
    assert jobs[4].shards == {"node1": {2: 4}} and jobs[4].gpus == {}


def test_finished_jobs_keep_gpus_exit_codes_and_end(jobs):
    assert jobs[7].state == "COMPLETED" and jobs[7].exit_code == "0:0" and jobs[7].gpus == {"node2": [0]}
    assert jobs[8].state == "FAILED" and jobs[8].exit_code == "3:0" and jobs[8].reason == "NonZeroExitCode"
    assert jobs[9].state == "CANCELLED" and jobs[9].exit_code == "0:15" and jobs[9].gpus == {"node1": [6]}
    assert jobs[1].gpus == {"node2": [3, 5]} and jobs[1].end_time == datetime.fromtimestamp(
        1795277980, tz=UTC
    )
    assert all(j.finished for j in (jobs[1], jobs[7], jobs[8], jobs[9]))


def test_nodes_healthy(slurm_fixture):
    nodes = {n.name: n for n in parse_sinfo_json(slurm_fixture("sinfo.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert all(n.gpu_indices == list(range(8)) for n in nodes.values())
    assert not any(n.bad for n in nodes.values())
    assert nodes["node3"].gpus_used == [0, 1] and nodes["node4"].gpus_used == [0, 1]
    assert nodes["node1"].gpus_used == [] and nodes["node1"].gpus_shared == [2]


def test_nodes_down_and_draining_are_bad(slurm_fixture):
    nodes = {n.name: n for n in parse_sinfo_json(slurm_fixture("sinfo_bad_nodes.json"))}
    assert nodes["node2"].bad and nodes["node2"].state == "DOWN" and nodes["node2"].reason == "test down"
    assert (
        nodes["node4"].bad and nodes["node4"].state == "MIXED+DRAIN" and nodes["node4"].reason == "fan broken"
    )
    assert not nodes["node1"].bad and not nodes["node3"].bad


@pytest.mark.parametrize(
    ("fixture", "node", "state"),
    [
        ("sinfo_no_new_work_1.json", "node1", "IDLE+MAINTENANCE+RESERVED"),
        ("sinfo_no_new_work_1.json", "node2", "DOWN+REBOOT_ISSUED+RESERVED"),
        ("sinfo_no_new_work_1.json", "node4", "IDLE+POWERED_DOWN"),
        ("sinfo_no_new_work_2.json", "node1", "MIXED+MAINTENANCE+REBOOT_REQUESTED+RESERVED"),
    ],
)
def test_nodes_that_take_no_new_work_are_bad(slurm_fixture, fixture, node, state):
    nodes = {n.name: n for n in parse_sinfo_json(slurm_fixture(fixture))}
    assert nodes[node].state == state and nodes[node].bad


def test_each_no_new_work_word_alone_makes_a_node_bad():
    base = {"name": "n1", "state": "idle", "gres": "gpu:g0:1"}
    for flag in ["MAINTENANCE", "RESERVED", "REBOOT_REQUESTED", "POWERED_DOWN", "POWERING_UP", "DRAIN"]:
        assert node_from_json({**base, "state_flags": [flag]}).bad, flag
    assert not node_from_json({**base, "state_flags": ["PLANNED"]}).bad  # backfill's plan, not a refusal


def test_sacct_records(slurm_fixture):
    recs = {r.job_id: r for r in parse_sacct(slurm_fixture("sacct.txt"), RECORDED_FIELDS)}
    assert recs[3].gpus == {"node3": [0, 1], "node4": [0, 1]} and recs[3].state == "RUNNING"
    assert recs[3].end_time is None and recs[3].start_time == datetime.fromtimestamp(1795278012, tz=UTC)
    assert recs[7].state == "COMPLETED" and recs[7].elapsed_s == 1 and recs[7].gpus == {"node2": [0]}
    assert recs[8].exit_code == "3:0" and recs[8].state == "FAILED"
    assert recs[9].state == "CANCELLED"  # 'CANCELLED by 0'
    assert recs[1].name == "test1" and recs[1].exit_code == "0:15"
    assert recs[5].nodes == [] and recs[5].state == "PENDING"


def test_a_job_name_may_hold_the_separator_and_line_breaks():
    d = "|hbx|"
    row = d.join(["12", "12", "alice", "cv", "normal", "COMPLETED", "100", "101", "102", "1", "node1",
                  "gres/gpu:g3=1,gres/gpu=1", "0:0", ""])  # fmt: skip
    text = f"{row}{d}a|b\n13|13|x\n\n{row.replace('12', '14', 2)}{d}c\n"
    assert [(r.job_id, r.name, r.gpus) for r in parse_sacct(text, delimiter=d)] == [
        (12, "a|b\n13|13|x\n", {"node1": [3]}),
        (14, "c", {"node1": [3]}),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:g3:1(IDX:3),gpu:g5:1(IDX:5)", ([3, 5], {})),
        ("gpu:g0:1(IDX:0-1),shard:g2:4(IDX:2)", ([0, 1], {2: 4})),
        ("gpu:2(IDX:0,3)", ([0, 3], {})),
        ("", ([], {})),
    ],
)
def test_gres_detail(text, expected):
    assert gpus_in_detail(text) == expected


def test_split_and_typed_request():
    assert split_gres("gres:gpu:g3:1,gres:shard:g2:4") == [("gpu", "g3", 1, ""), ("shard", "g2", 4, "")]
    assert split_gres("gpu:2") == [("gpu", None, 2, "")]
    assert typed_request("gres:gpu:g3:1,gres:gpu:g5:1,gres:shard:g2:4") == ([3, 5], {2: 4})
    assert typed_request("N/A") == ([], {})


def test_small_helpers():
    assert expand_hostlist("node[1-3],node7") == ["node1", "node2", "node3", "node7"]
    assert expand_hostlist("None assigned") == []
    assert expand_ranges("0-2,5,N/A") == [0, 1, 2, 5]
    assert exit_code_from_status(768) == "3:0" and exit_code_from_status(15) == "0:15"
    assert parse_job_id("42\n") == 42 and parse_job_id("43;hivebatch\n") == 43
    with pytest.raises(HivebatchError):
        parse_job_id("sbatch: error")
    with pytest.raises(HivebatchError):
        parse_squeue_json("not json")


def test_held_jobs_keep_their_dependency_and_begin_time(slurm_fixture):
    import json

    recorded = json.loads(slurm_fixture("squeue_dependency_begin_held.json"))
    jobs = [job_from_json({**r, "job_state": "PENDING"}) for r in recorded]
    dep, begin = jobs
    assert dep.dependency.endswith("(unfulfilled)") and dep.held and dep.eligible_time is None
    assert begin.dependency == "" and begin.eligible_time is not None and begin.held


def test_a_begin_past_the_last_date_python_has_is_read_as_far_away(slurm_fixture):
    from hivebatch.cli.hq.rows import row_from_slurm
    from hivebatch.slurm.parse import FAR_FUTURE

    # a plain job's --begin=now+99999999days: eligible in the year 275817, as Slurm holds it
    (job,) = parse_squeue_json(slurm_fixture("squeue_begin_past_any_date.json"))
    assert job.state == "PENDING" and job.eligible_time == FAR_FUTURE and job.reason == "BeginTime"
    assert row_from_slurm(job).reason


def test_an_srun_waiting_for_its_allocation_is_no_batch_job(slurm_fixture):
    (waiting,) = parse_squeue_json(slurm_fixture("squeue_pending_srun.json"))
    assert (waiting.name, waiting.state, waiting.batch) == ("waiting-srun", "PENDING", False)
    assert all(j.batch for j in parse_squeue_json(slurm_fixture("squeue.json")))


def test_a_deadline_and_time_min_are_read_as_slurm_judges_them(slurm_fixture):
    jobs = {j.name: j for j in parse_squeue_json(slurm_fixture("squeue_deadline.json"))}
    assert jobs["dlmin"].deadline == datetime(2026, 11, 27, 23, 0, tzinfo=UTC)
    assert (jobs["dlmin"].time_min_s, jobs["dlmin"].time_limit_s) == (120, 300)
    assert jobs["nodl"].deadline is None and jobs["nodl"].time_min_s is None
    assert jobs["dlbob"].state == "DEADLINE" and jobs["dlbob"].reason == "DeadLine"


def test_reservations_are_read_with_their_windows_in_utc(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_reservations

    found = {r.name: r for r in parse_reservations(slurm_fixture("reservations.txt"))}
    assert sorted(found) == ["alice_res", "daily", "maint1", "part4"]
    maint = found["maint1"]
    assert maint.nodes == ("node1", "node2")
    assert (maint.start, maint.end) == (
        datetime(2026, 11, 28, 19, 15, 55),
        datetime(2026, 11, 28, 20, 15, 55),
    )
    assert found["daily"].nodes == ("node4",) and found["alice_res"].nodes == ("node3",)
    assert parse_reservations(slurm_fixture("reservations_none.txt")) == []


def test_partitions_are_read_with_their_state_and_nodes(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_partitions

    text = slurm_fixture("partitions_down.txt")
    states = [p.state for p in parse_partitions(text)]
    assert states == ["DOWN", "INACTIVE"]
    (first, _) = parse_partitions(text)
    assert first.name == "gpu" and first.nodes == ("node1", "node2", "node3", "node4")
    assert parse_partitions("PartitionName=all Nodes=ALL State=UP")[0].nodes == ("ALL",)


def test_a_partitions_max_time_is_read(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_partitions

    (gpu,) = parse_partitions(slurm_fixture("partition_time_limit.txt"))
    assert (gpu.state, gpu.max_time_s) == ("UP", 1800)
    assert parse_partitions(slurm_fixture("partitions_down.txt"))[0].max_time_s is None  # UNLIMITED


def test_a_jobs_temporary_disk_and_the_nodes_are_read(slurm_fixture):
    # alice's held `sbatch -H --gres=gpu:1 --tmp=100` (job 1645); the lab's nodes have TmpDisk=0
    (job,) = parse_squeue_json(slurm_fixture("squeue_tmp_disk.json"))
    assert job.tmp_disk_mb == 100
    assert {n.tmp_disk_mb for n in parse_sinfo_json(slurm_fixture("sinfo.json"))} == {0}


def test_a_jobs_node_layout_and_the_nodes_are_read(slurm_fixture):
    # alice's held `sbatch -H --gres=gpu:1 -B 3:10:2` (job 1690) on the lab's 2 x 8 x 1 nodes
    (job,) = parse_squeue_json(slurm_fixture("squeue_node_layout.json"))
    assert (job.sockets_per_node, job.cores_per_socket, job.threads_per_core) == (3, 10, 2)
    (plain,) = [j for j in parse_squeue_json(slurm_fixture("squeue_tmp_disk.json"))]
    assert (plain.sockets_per_node, plain.cores_per_socket, plain.threads_per_core) == (0, 0, 0)
    nodes = parse_sinfo_json(slurm_fixture("sinfo.json"))
    assert {(n.sockets, n.cores_per_socket, n.threads_per_core) for n in nodes} == {(2, 8, 1)}


def test_a_partitions_cap_on_cpus_per_node_is_read(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_partitions

    gpu, small = parse_partitions(slurm_fixture("partition_max_cpus.txt"))
    assert (gpu.name, gpu.max_cpus_per_node) == ("gpu", None)  # UNLIMITED
    assert (small.name, small.nodes, small.max_cpus_per_node) == ("small", ("node3", "node4"), 8)


def test_a_partitions_node_count_limits_are_read(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_partitions

    gpu, one, two = parse_partitions(slurm_fixture("partition_node_limits.txt"))
    assert [(p.name, p.min_nodes, p.max_nodes) for p in (gpu, one, two)] == [
        ("gpu", 1, 0),  # MinNodes=0, MaxNodes=UNLIMITED
        ("one", 1, 1),
        ("two", 2, 0),
    ]


def test_a_partitions_cap_on_a_jobs_memory_per_node_is_read(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_partitions

    (p,) = parse_partitions(slurm_fixture("partition_max_mem.txt"))
    assert (p.name, p.max_mem_per_node_mb) == ("p", 30000)
    assert parse_partitions(slurm_fixture("partitions_down.txt"))[0].max_mem_per_node_mb is None  # UNLIMITED


def test_who_a_partition_lets_in_is_read(slurm_fixture) -> None:
    from hivebatch.slurm.parse import parse_partitions
    from hivebatch.slurm.types import PartitionAccess

    (p,) = parse_partitions(slurm_fixture("partition_access.txt"))
    assert p.access == PartitionAccess(
        allow_accounts=frozenset({"nlp", "hivebatch"}), deny_qos=frozenset({"opportunistic"})
    )
    # as squeue gives Slurm's own reasons for the recorded jobs
    assert p.access.keeps_out("cv", "normal") == "allows account hivebatch,nlp not cv"
    assert p.access.keeps_out("hivebatch", "opportunistic") == "denies QOS opportunistic"
    assert p.access.keeps_out("nlp", "normal") is None
    assert parse_partitions(slurm_fixture("partitions_down.txt"))[0].access == PartitionAccess()
