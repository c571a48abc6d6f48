"""Every GPU job goes through the cells: the job_submit plugin on the real lab, path by path.

Each test submits as a lab user with Slurm's own clients (no hivebatch code on the submitting side) and
checks what slurmctld made of the job: GPU ask gone, the request in the admin comment, held; or a
one-line refusal. The clients run without SLURM_CONF, as on a real cluster (the lab's config is where
Slurm looks by default).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from lab_partitions import lab_partition
from lab_users import popen_as, run_as

from hivebatch.request import ADMIN_PREFIX, RELEASED_BEGIN, request_from_slurm

pytestmark = pytest.mark.integration


def _as(user: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return run_as(user, argv, timeout=60)


def _sbatch(lab, user: str, *opts: str) -> int:
    out = _as(
        user,
        [
            "sbatch",
            "--parsable",
            "-o",
            "/dev/null",
            "--chdir",
            str(lab.jobs_dir),
            *opts,
            "--wrap",
            "sleep 60",
        ],
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def _admin_request(job) -> dict:
    assert job.admin_comment.startswith(ADMIN_PREFIX), job.admin_comment
    return json.loads(job.admin_comment[len(ADMIN_PREFIX) :])


ASKS = [
    ("alice", ["--gres=gpu:2"], {"gpus": 2, "gpus_per_node": 2, "nodes": 1, "vc": "cv"}),
    ("alice", ["--gres=gpu:v100:1"], {"gpus": 1, "gpu_type": "V100", "vc": "cv"}),
    ("bob", ["--gpus=3"], {"gpus": 3, "vc": "nlp"}),
    (
        "bob",
        ["-N", "2", "--gpus-per-node=2", "-q", "prior"],
        {"gpus": 4, "nodes": 2, "gpus_per_node": 2, "qos": "prior"},
    ),
    ("bob", ["-n", "2", "--gpus-per-task=1"], {"gpus": 2}),
    # Slurm splits 3 over two nodes as 2 + 1; a job's GPUs here are the same on every node
    ("bob", ["-N", "2", "--gpus=3"], {"gpus": 4, "nodes": 2, "gpus_per_node": 2}),
    ("alice", ["--sockets-per-node=2", "--gpus-per-socket=1"], {"gpus_per_node": 2}),
    ("carol", ["--gres=shard:8"], {"gpu_mem_mib": 8192, "gpus": 1, "vc": "sys"}),
    ("carol", ["--gpus=2", "--cpus-per-gpu=2", "--mem-per-gpu=1000"], {"gpus": 2, "cpus_per_gpu": 2}),
    ("alice", ["--gpus=2", "--ntasks-per-gpu=2"], {"gpus": 2, "ntasks_per_gpu": 2}),
    ("carol", ["-q", "opportunistic", "--gpus=6"], {"gpus": 6, "qos": "opportunistic"}),
    # Slurm gives an exclusive job every GPU of its node, asked for or not: a whole-node GPU job
    ("alice", ["--exclusive"], {"gpus": 8, "gpus_per_node": 8, "nodes": 1, "exclusive": 1}),
    ("bob", ["--exclusive", "--gres=gpu:2"], {"gpus": 8, "gpus_per_node": 8, "exclusive": 1}),
]


@pytest.mark.parametrize(("user", "opts", "expect"), ASKS, ids=[" ".join(a[1]) for a in ASKS])
def test_every_gpu_form_becomes_a_held_request(slurm_lab, lab_jobs, user, opts, expect):
    jid = _sbatch(slurm_lab, user, *opts)
    lab_jobs.append(jid)
    job = slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    assert job.tres_per_node == "" and job.gpus == {}
    raw = _admin_request(job)
    assert {k: raw[k] for k in expect} == expect
    assert raw["vc"] == slurm_lab.users[user]  # the user's default account, as sbatch uses it
    req = request_from_slurm(job.admin_comment, job.comment, job.account, job.qos)
    assert req is not None and req.vc == job.account and req.qos == job.qos


REFUSED = [
    ("alice", ["--gres=gpu:a100:1"], "GPU type 'a100'"),
    ("alice", ["--gres=gpu:9"], "a node has at most 8"),
    ("carol", ["--gpus=5"], "virtual cluster sys has 4"),
    ("alice", ["--gres=gpu:1", "-N", "5"], "cluster has 4"),
    # cv's cells span one whole node (and a socket on another): a two-node job would wait for ever
    (
        "alice",
        ["--gres=gpu:1", "-N", "2"],
        "a job on 2 nodes needs as many whole-node cells, and virtual cluster cv has 1",
    ),
    ("alice", ["--gpus=11"], "virtual cluster cv has 1: ask for at most 8 GPUs on one node"),
    # no node count, but tasks two nodes must hold: plain Slurm spreads them, the controller rejected it
    (
        "alice",
        ["--gres=gpu:1", "-n", "4", "--ntasks-per-node=2"],
        "its 4 tasks, at most 2 on a node (--ntasks-per-node), need 2 nodes, and a job on several nodes"
        " runs in whole-node cells, of which virtual cluster cv has 1",
    ),
    (
        "bob",
        ["--gres=gpu:1", "-N", "2", "-w", "node3"],
        "-w/--nodelist names 1 node(s) but the job runs on 2",
    ),
    # sys: a switch pair and two single GPUs; 3 on one node fit none of its cells
    ("carol", ["--gres=gpu:3"], "virtual cluster sys's cells hold at most 2 GPUs on one node"),
    ("carol", ["--gres=shard:40"], "one GPU has 32"),
    (
        "carol",
        ["--exclusive"],
        "--exclusive takes whole nodes with all their 8 GPUs, but virtual cluster sys has 4",
    ),
    # plain Slurm keeps it pending for its BeginTime; unrecorded, hivebatch would have started it at once
    ("bob", ["--gpus=1", "--begin=2999-12-31T23:59:59"], "a --begin on or after 2100-01-01 cannot be told"),
]


@pytest.mark.parametrize(("user", "opts", "why"), REFUSED, ids=[" ".join(a[1]) for a in REFUSED])
def test_impossible_asks_are_refused_at_submit_with_one_line(slurm_lab, user, opts, why):
    out = _as(user, ["sbatch", "-o", "/dev/null", *opts, "--wrap", "true"])
    assert out.returncode != 0
    first = out.stderr.splitlines()[0]
    assert first.startswith("sbatch: error: hivebatch: ") and why in first, out.stderr


def test_an_srun_whose_tasks_its_vc_cannot_hold_is_refused_at_once(slurm_lab, lab_jobs):
    # before, slurmctld took it held, the controller rejected it, and srun waited after saying why
    out = _as("alice", ["srun", "--gpus-per-task=1", "-n", "4", "--ntasks-per-node=2", "-t", "1", "true"])
    assert out.returncode != 0
    assert (
        "srun: error: hivebatch: its 4 tasks, at most 2 on a node (--ntasks-per-node), need 2 nodes"
        in out.stderr
    )


def test_a_heterogeneous_gpu_job_is_refused_with_what_to_do_instead(slurm_lab, lab_jobs):
    out = _as("carol", ["sbatch", "-o", "/dev/null", "--gpus=1", "--wrap", "true", ":", "--wrap", "true"])
    assert out.returncode != 0
    # sbatch names the component: "sbatch: error: 0: hivebatch: ..."
    assert "hivebatch: a heterogeneous job cannot ask for GPUs" in out.stderr.splitlines()[0], out.stderr
    assert "submit the components as separate jobs" in out.stderr
    plain = _as(
        "carol",
        ["sbatch", "--parsable", "-o", "/dev/null", "--hold", "--wrap", "true", ":", "--wrap", "true"],
    )
    assert plain.returncode == 0, plain.stderr  # without GPUs it is Slurm's own business
    lab_jobs.append(int(plain.stdout.strip().split(";")[0].split("+")[0]))


def test_srun_and_salloc_gpu_jobs_are_held_for_the_cells(slurm_lab, lab_jobs):
    # interactive clients wait for their allocation: start them, look at the job, then let them go
    procs = [
        popen_as("alice", cmd)
        for cmd in (
            ["srun", "--gres=gpu:1", "-J", "srun-gpu", "hostname"],
            ["salloc", "--gpus=2", "-J", "salloc-gpu", "true"],
        )
    ]
    try:
        be = slurm_lab.backend()
        deadline = time.monotonic() + 20
        seen = {}
        while time.monotonic() < deadline and len(seen) < 2:
            seen = {
                j.name: j
                for j in be.list_jobs()
                if j.name in ("srun-gpu", "salloc-gpu") and j.state == "PENDING"
            }
            time.sleep(0.3)
        assert set(seen) == {"srun-gpu", "salloc-gpu"}
        lab_jobs.extend(j.job_id for j in seen.values())
        assert all(j.held and j.tres_per_node == "" for j in seen.values())
        assert _admin_request(seen["srun-gpu"])["gpus"] == 1
        assert _admin_request(seen["salloc-gpu"])["gpus"] == 2
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.parametrize(
    ("opts", "what"),
    [
        # whole nodes with more tasks than nodes: a total would be taken from them unevenly
        (
            ["-N", "2", "-n", "4", "--exclusive", "--gres=gpu:2", "-q", "opportunistic"],
            "a per-node GPU count (2 per node)",
        ),
        # a model the cli_filter cannot turn into a constraint: Slurm reads "|" beside it
        (["--gres=gpu:v100:1", "-C", "v100|a100"], "a GPU type (v100)"),
    ],
)
def test_an_srun_whose_own_step_slurm_would_refuse_is_refused_at_once(slurm_lab, opts, what):
    # on per-GPU pins slurmctld refuses such a step after the wait (tests/fixtures/slurm/srun_step_gres.txt);
    # what cli_filter.lua cannot rewrite, the plugin refuses
    out = run_as("alice", ["srun", *opts, "-t", "5", "hostname"], timeout=60)
    assert out.returncode != 0
    assert out.stderr.splitlines()[0] == (
        f"srun: error: hivebatch: srun cannot start its own step with {what} on hivebatch's per-GPU pins: "
        "ask srun for the job's GPUs as --gpus=N, or get them with salloc and run a plain srun inside"
    )


def test_the_operator_and_cpu_jobs_pass_untouched(slurm_lab, lab_jobs):
    cpu = _sbatch(slurm_lab, "alice", "-J", "cpu-only")
    lab_jobs.append(cpu)
    job = slurm_lab.wait_for(cpu, {"RUNNING", "COMPLETED"})
    assert job.admin_comment == ""
    out = _as(
        slurm_lab.operator,
        [
            "sbatch",
            "--parsable",
            "-A",
            "hivebatch",
            "--hold",
            "-o",
            "/dev/null",
            "--gres=gpu:g2:1",
            "--wrap",
            "true",
        ],
    )
    assert out.returncode == 0, out.stderr
    op_job = int(out.stdout.strip())
    lab_jobs.append(op_job)
    job = slurm_lab.wait_for(op_job, {"PENDING"}, held=True)
    assert job.admin_comment == "" and "gpu:g2:1" in job.tres_per_node


@pytest.mark.parametrize("opts", [["--gres=gpu:0"], ["--gpus=0"], ["-n", "2", "--gpus-per-task=0"]])
def test_a_zero_gpu_count_runs_as_a_cpu_job_as_under_plain_slurm(slurm_lab, lab_jobs, opts):
    # job templates write "no GPU" this way; plain Slurm runs it without GPUs (zero_gpus_accepted.txt)
    jid = _sbatch(slurm_lab, "alice", *opts)
    lab_jobs.append(jid)
    job = slurm_lab.wait_for(jid, {"RUNNING", "COMPLETED"})
    assert job.admin_comment == "" and job.gpus == {}


TAMPER = [
    ['AdminComment=hivebatch:v2:{"gpus":8}'],
    # a new GPU ask is checked as a submission's: more than a node or the VC holds is refused
    ["Gres=gpu:16"],
    ["TresPerJob=gres:gpu:64"],
]


def test_the_owner_cannot_tamper_with_a_waiting_gpu_job(slurm_lab, lab_jobs):
    jid = _sbatch(slurm_lab, "alice", "--gres=gpu:1")
    lab_jobs.append(jid)
    before = slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    for change in TAMPER:
        out = _as("alice", ["scontrol", "update", f"JobId={jid}", *change])
        assert out.returncode != 0, change
    # what Slurm normally allows still works, and a comment changes nothing for the cells; a start time
    # is Slurm's begin time, the nodes it lists or excludes are where the controller may place it, and
    # the plugin's hold still keeps the job from starting without its GPUs; a new GPU ask or node count
    # goes to the controller's ledger, never onto the job (tests/fixtures/slurm/owner_start_time.txt,
    # owner_exclude_nodes.txt, owner_gpu_update.txt)
    allowed = (
        ["Gres=gpu:2"],
        ["TresPerJob=gres:gpu:2"],
        ["NumNodes=1"],
        ["Name=renamed"],
        ["TimeLimit=30"],
        ['Comment=hivebatch:hints:{"model":"x"}'],
        ["NodeList=node1"],
        ["ExcNodeList=node2"],
        ["StartTime=now"],
    )
    for change in allowed:
        out = _as("alice", ["scontrol", "update", f"JobId={jid}", *change])
        assert out.returncode == 0, (change, out.stderr)
    after = slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    assert after.admin_comment == before.admin_comment and after.tres_per_node == ""
    assert after.name == "renamed" and after.time_limit_s == 1800


def test_an_owner_release_keeps_the_job_waiting_for_the_controller(slurm_lab, lab_jobs):
    jid = _sbatch(slurm_lab, "bob", "--gres=gpu:1")
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    assert _as("bob", ["scontrol", "release", str(jid)]).returncode == 0
    job = slurm_lab.wait_for(jid, {"PENDING"}, held=False)
    assert job.eligible_time is not None and int(job.eligible_time.timestamp()) == RELEASED_BEGIN
    # a start time over the release's mark is the controller's to keep; the mark stays
    assert _as("bob", ["scontrol", "update", f"JobId={jid}", "StartTime=now"]).returncode == 0
    time.sleep(3)  # longer than the lab's sched_interval: Slurm has looked at it and left it alone
    job = slurm_lab.wait_for(jid, {"PENDING"})
    assert job.reason == "BeginTime" and job.gpus == {}
    assert job.eligible_time is not None and int(job.eligible_time.timestamp()) == RELEASED_BEGIN


def test_gpus_cannot_be_added_to_a_plain_job_by_update(slurm_lab, lab_jobs):
    out = _as("carol", ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"])
    jid = int(out.stdout.strip())
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    for change in (["Gres=gpu:1"], ["TresPerNode=gres:gpu:1"]):
        assert _as("carol", ["scontrol", "update", f"JobId={jid}", *change]).returncode != 0


def test_another_users_gpu_job_is_out_of_reach(slurm_lab, lab_jobs):
    jid = _sbatch(slurm_lab, "alice", "--gres=gpu:1")
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    for argv in (
        ["scontrol", "release", str(jid)],
        ["scancel", str(jid)],
        ["scontrol", "update", f"JobId={jid}", "Name=x"],
    ):
        assert _as("bob", argv).returncode != 0


@pytest.fixture
def whole_partition(slurm_lab):
    """A partition that gives every job whole nodes (tests/fixtures/slurm/partition_exclusive_gpus.txt)."""
    with lab_partition("whole", "Nodes=node4", "OverSubscribe=EXCLUSIVE") as name:
        yield name


def test_a_job_in_a_whole_node_partition_counts_every_gpu_of_its_nodes(slurm_lab, lab_jobs, whole_partition):
    for opts in (["--gres=gpu:1"], []):
        jid = _sbatch(slurm_lab, "alice", "-p", whole_partition, *opts)
        lab_jobs.append(jid)
        raw = _admin_request(slurm_lab.wait_for(jid, {"PENDING"}, held=True))
        assert (raw["gpus"], raw["gpus_per_node"], raw["exclusive"]) == (8, 8, 1)
    out = _as("carol", ["sbatch", "-o", "/dev/null", "-p", whole_partition, "--gres=gpu:1", "--wrap", "true"])
    assert out.returncode != 0
    assert out.stderr.splitlines()[0] == (
        "sbatch: error: hivebatch: partition whole (OverSubscribe=EXCLUSIVE) takes whole nodes with all "
        "their 8 GPUs, but virtual cluster sys has 4: submit it to a partition that shares its nodes"
    )
    # nor can a job move there by an update, with GPUs or without
    shared = _sbatch(slurm_lab, "alice", "--gres=gpu:1")
    plain = _sbatch(slurm_lab, "alice", "--hold")
    lab_jobs.extend([shared, plain])
    for jid in (shared, plain):
        slurm_lab.wait_for(jid, {"PENDING"}, held=True)
        moved = _as("alice", ["scontrol", "update", f"JobId={jid}", f"Partition={whole_partition}"])
        assert moved.returncode != 0 and "denied" in moved.stderr, moved.stderr
