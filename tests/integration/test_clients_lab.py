"""Every submission path reaches the cells on the real lab: plain sbatch, srun, salloc, and the job
commands of real workflow tools (submitit, dask-jobqueue, Snakemake's Slurm executor).

A controller runs in a background thread every second, as `hivebatch controller run --loop` would; each
client runs as a lab user without SLURM_CONF and reports, from inside its job, the GPUs it was given,
which must be the GPUs the cells chose (the ledger's placement).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_controller import Ctl
from lab_partitions import lab_partition
from lab_users import popen_as, run_as
from sqlalchemy.exc import NoResultFound

from hivebatch.controller.cycle import run_cycle
from hivebatch.replay.live import ScopedBackend
from hivebatch.slurm.cli import CliBackend

# one database is enough here: the controller's SQLite/PostgreSQL parity is test_controller_lab's
pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]

PROJECT = Path(__file__).resolve().parents[2]
TOOLS = ("submitit==1.5.4", "dask-jobqueue==0.9.0")


class Loop:
    """The controller's loop mode in a thread: a cycle a second until stopped."""

    def __init__(self, ctl: Ctl) -> None:
        self.ctl, self.stop, self.errors = ctl, threading.Event(), []  # type: ignore[var-annotated]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.ctl.cycle()
            except Exception as exc:  # reported by the test, not lost in the thread
                self.errors.append(exc)
            self.stop.wait(1.0)


@pytest.fixture
def loop(ctl: Ctl) -> Iterator[Loop]:
    lp = Loop(ctl)
    lp.thread.start()
    yield lp
    lp.stop.set()
    lp.thread.join(timeout=30)
    assert not lp.errors, lp.errors


def _adopt(ctl: Ctl, name: str, timeout_s: float = 30) -> int:
    """Let the scoped controller see the lab's pending job(s) of this name (submitted by a client)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ids = [j.job_id for j in ctl.backend.inner.list_jobs() if j.name == name]
        if ids:
            ctl.mine.update(ids)
            return ids[0]
        time.sleep(0.3)
    raise AssertionError(f"no job named {name} appeared in squeue")


def _placed(ctl: Ctl, jid: int) -> dict[str, list[int]]:
    job = ctl.job(jid)
    assert job.placement, (job.state, job.reason)
    return {n: sorted(g) for n, g in job.placement.items()}


def _gpus_line(host: str, cvd: str) -> dict[str, list[int]]:
    return {host: sorted(int(x) for x in cvd.split(","))}


def test_plain_sbatch_gres_job_runs_on_the_cells_choice(ctl: Ctl, loop: Loop) -> None:
    name = f"{ctl.tag}-sbatch"
    out = ctl.jobs_dir / f"{name}.out"
    proc = run_as("bob", ["sbatch", "--parsable", "-J", name, "--gres=gpu:2", "-o", str(out), "-t", "5",
                       "--wrap", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"; sleep 30'])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = ctl.lab.wait_for_file(out, "gpus ", timeout_s=60)
    host, cvd = text.split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)


def test_srun_gets_cell_placed_gpus_within_seconds(ctl: Ctl, loop: Loop) -> None:
    name = f"{ctl.tag}-srun"
    t0 = time.monotonic()
    proc = popen_as("alice", ["srun", "-J", name, "--gpus=1", "-t", "5",
                              "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    waited = time.monotonic() - t0
    assert proc.returncode == 0, err
    host, cvd = out.split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)
    assert waited < 30, f"srun waited {waited:.0f} s for a free GPU"


def test_srun_asking_gpus_per_node_runs_through_the_cli_filter(ctl: Ctl, loop: Loop) -> None:
    # on per-GPU pins Slurm refused srun's own step for --gres=gpu:2 (srun_step_gres.txt);
    # cli_filter.lua asks for the same GPUs per step on one node
    # a GPU model named to srun (refused by the plugin before) becomes a --constraint on the nodes
    for opt in ("--gres=gpu:2", "--gpus-per-node=2", "--gres=gpu:v100:2", "--gpus=v100:2"):
        name = f"{ctl.tag}-srun{opt[2:6]}{'-typed' if 'v100' in opt else ''}"
        proc = popen_as("alice", ["srun", "-J", name, opt, "-t", "5",
                                  "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
        jid = _adopt(ctl, name)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        host, cvd = out.split("gpus ", 1)[1].split()[:2]
        placed = _placed(ctl, jid)
        assert _gpus_line(host, cvd) == placed and len(placed[host]) == 2


def test_a_batch_jobs_srun_may_repeat_its_gpu_ask(ctl: Ctl, loop: Loop) -> None:
    # `#SBATCH --gres=gpu:4` then `srun --gres=gpu:4 python train.py`: the step was refused on per-GPU
    # pins; through the cli_filter it gets the GPUs it asks for, as under plain Slurm
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-repeat", "--gres=gpu:4")
    assert [ln.split()[3] for ln in tasks]  # the plain step ran
    name = f"{ctl.tag}-repeat2"
    out = ctl.jobs_dir / f"{name}.out"
    steps = "; ".join(
        f'srun {opt} bash -c "echo {tag} \\$CUDA_VISIBLE_DEVICES"'
        for tag, opt in (
            ("all4", "--gres=gpu:4"),
            ("two", "--gres=gpu:2"),
            ("typed", "--gres=gpu:v100:1"),
            ("pernode", "--gpus-per-node=2"),
        )  # fmt: skip
    )
    proc = run_as("bob", ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", "--gres=gpu:4",
                          "--wrap", f"{steps}; echo steps-done"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = _output(ctl, jid, out, "steps-done")
    seen = {ln.split()[0]: ln.split()[1].split(",") for ln in text.splitlines() if len(ln.split()) == 2}
    (gpus,) = _placed(ctl, jid).values()
    assert sorted(int(g) for g in seen["all4"]) == gpus, text
    assert [len(seen[k]) for k in ("two", "typed", "pernode")] == [2, 1, 2], text
    assert all(int(g) in gpus for k in seen for g in seen[k])


@pytest.mark.parametrize("ask", ["--gres=gpu:2", "--gpus=v100:2"])
def test_salloc_allocation_and_its_own_srun_use_the_cells_gpus(ctl: Ctl, loop: Loop, ask: str) -> None:
    # the model named to salloc is in its shell's SLURM_GPUS, which the srun reads back
    # (tests/fixtures/slurm/step_typed_gpus.txt)
    name = f"{ctl.tag}-salloc-{ask.split('=')[0].strip('-')}"
    proc = popen_as("carol", ["salloc", "-J", name, ask, "-t", "5",
                              "srun", "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    host, cvd = out.split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)


@pytest.mark.parametrize("tasks", [[], ["--ntasks-per-node=2"]])
def test_a_two_node_sallocs_srun_repeating_its_gres_gets_them_on_each_node(
    ctl: Ctl, loop: Loop, tasks: list[str]
) -> None:
    # salloc's shell does not say how many GPUs the job holds on a node, and the step's per-node ask
    # failed on the per-GPU pins; plain Slurm gives 2 on each node (srun_new_job_nodes.txt)
    name = f"{ctl.tag}-salloc2n{len(tasks)}"
    proc = popen_as("bob", ["salloc", "-J", name, "-N", "2", *tasks, "--gres=gpu:2", "-q", "opportunistic", "-t", "5",
                            "srun", "--gres=gpu:2", "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert sorted(len(g) for g in _tasks_ran_on_placement(ctl, jid, out).values()) == [2, 2]
    assert sum(ln.startswith("gpus ") for ln in out.splitlines()) == 2 * (1 + len(tasks))


def test_an_srun_attached_with_jobid_gets_its_per_node_gpus_on_each_node(ctl: Ctl, loop: Loop) -> None:
    # from a login node srun --jobid has no SLURM_JOB_ID: read as a new job on one node it got one GPU
    # on each node, where plain Slurm gives 2 (srun_new_job_nodes.txt)
    name = f"{ctl.tag}-nosh"
    alloc = popen_as("bob", ["salloc", "--no-shell", "-J", name, "-N", "2", "--gres=gpu:2", "-q", "opportunistic",
                             "-t", "5"])  # fmt: skip
    jid = _adopt(ctl, name)
    _, err = alloc.communicate(timeout=90)
    assert alloc.returncode == 0, err
    out = run_as("bob", ["srun", f"--jobid={jid}", "--gres=gpu:2",
                         "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'], timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert sorted(len(g) for g in _tasks_ran_on_placement(ctl, jid, out.stdout).values()) == [2, 2]


def test_an_srun_whose_job_can_never_run_is_told_why_in_its_terminal(ctl: Ctl) -> None:
    # slurmctld accepts -c 500 (more CPUs than the partition has: it would wait for ever, reason
    # PartitionConfig; held_impossible_accepted.txt), and so does the plugin; a controller run as root
    # (as the lab's is) may notify it, the Operator may not
    name = f"{ctl.tag}-never"
    proc = popen_as("alice", ["srun", "-J", name, "--gpus=1", "-c", "500", "-t", "5", "true"])
    jid = _adopt(ctl, name)
    root = ScopedBackend(CliBackend(), ctl.mine)
    for _ in range(3):  # told once, not every cycle
        run_cycle(ctl.ctx, ctl.factory, root)
    reason = ctl.job(jid).reason
    assert ctl.job(jid).state == "rejected" and "has 16 CPUs, the job needs 500" in reason
    run_as("alice", ["scancel", str(jid)])  # what the student does on reading it (Ctrl-C)
    _, err = proc.communicate(timeout=60)
    told = [ln for ln in err.splitlines() if "cannot be placed" in ln]
    assert told == [f"srun: hivebatch: job {jid} cannot be placed: {reason}"], err


def _output(ctl: Ctl, jid: int, out: Path, marker: str) -> str:
    """The job's output once it shows ``marker``; if it never does, the controller's reason for the job."""
    try:
        return ctl.lab.wait_for_file(out, marker, timeout_s=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the controller says: {ctl.job(jid).reason}") from None


# each srun task reports its host and GPUs; the batch script ends with steps-ok or steps-failed
TASK_GPUS = 'srun bash -c "echo task \\$SLURM_PROCID \\$(hostname) \\$CUDA_VISIBLE_DEVICES"'


def _ran_two_gpus_on_each_of_two_nodes(ctl: Ctl, jid: int, out: Path) -> None:
    """The job's tasks ran on the two nodes and GPUs it was placed on, two GPUs on each."""
    text = _output(ctl, jid, out, "steps-")
    assert "steps-ok" in text, text
    seen = [ln.split()[2:] for ln in text.splitlines() if ln.startswith("task ")]
    placed = _placed(ctl, jid)
    assert len(placed) == 2 and all(len(g) == 2 for g in placed.values())
    assert _by_host((h, [int(x) for x in cvd.split(",")]) for h, cvd in seen) == placed


def _sbatch_steps(ctl: Ctl, user: str, name: str, *opts: str) -> tuple[int, list[str]]:
    """A batch job whose srun tasks each report their GPUs; its id and the task lines once it ended."""
    out = ctl.jobs_dir / f"{name}.out"
    proc = run_as(user, ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", *opts,
                         "--wrap", f"{TASK_GPUS} && echo steps-ok || echo steps-failed"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = _output(ctl, jid, out, "steps-")
    assert "steps-ok" in text, text
    return jid, [ln for ln in text.splitlines() if ln.startswith("task ")]


def test_an_srun_inside_a_gpus_per_task_job_gives_each_task_gpus_of_its_own(ctl: Ctl, loop: Loop) -> None:
    # as under plain Slurm (tests/fixtures/slurm/step_gpus_per_task.txt); the job's GPUs are the cells'
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-pertask", "-n", "2", "--gpus-per-task=2")
    seen = {}
    for line in tasks:
        _, rank, host, cvd = line.split()
        seen[int(rank)] = (host, sorted(int(x) for x in cvd.split(",")))
    assert sorted(seen) == [0, 1] and all(len(g) == 2 for _, g in seen.values())
    assert not set(seen[0][1]) & set(seen[1][1]) or seen[0][0] != seen[1][0]
    placed = _placed(ctl, jid)
    assert {h: sorted(g) for h, g in _by_host(seen.values()).items()} == placed


def test_gpus_that_do_not_split_evenly_over_the_nodes_run_as_the_same_gpus_on_each(
    ctl: Ctl, loop: Loop
) -> None:
    # plain Slurm runs -N 2 --gpus=3 as 2 + 1 GPUs; the pins are per node, so each node gets 2. (No VC
    # of this controller's config spans two whole nodes, so the job runs on idle GPUs.)
    name = f"{ctl.tag}-uneven"
    out = ctl.jobs_dir / f"{name}.out"
    proc = run_as("bob", ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", "-N", "2", "--gpus=3",
                          "-q", "opportunistic", "--wrap", f"{TASK_GPUS} && echo steps-ok || echo steps-failed"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "hivebatch: note: 3 GPUs run as 2 on each of 2 nodes (4 in all)" in proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    _ran_two_gpus_on_each_of_two_nodes(ctl, jid, out)


def test_cpus_per_task_changed_while_waiting_reach_every_node_of_the_job(ctl: Ctl, loop: Loop) -> None:
    # slurmctld 22.05 counts the CPUs again only when the update gives the node count: after
    # CPUsPerTask=8 alone it kept NumCPUs=1 and started a 2-node job with GPUs on one node, which the
    # controller then requeued every cycle (tests/fixtures/slurm/update_cpus_per_task.txt)
    name = f"{ctl.tag}-cpt"
    out = ctl.jobs_dir / f"{name}.out"
    proc = run_as("bob", ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", "-N", "2",
                          "--gpus-per-node=2", "-q", "opportunistic", "--hold",
                          "--wrap", f"{TASK_GPUS} && echo steps-ok || echo steps-failed"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    for change in (["update", f"JobId={jid}", "CPUsPerTask=8"], ["release", str(jid)]):
        done = run_as("bob", ["scontrol", *change])
        assert done.returncode == 0, done.stderr
    _ran_two_gpus_on_each_of_two_nodes(ctl, jid, out)
    assert not ctl.events(jid, "placement_incident")


@pytest.mark.parametrize(
    ("ask", "why"),
    [
        (("-n", "32", "--gres=gpu:1"), "its 32 CPUs need 2 nodes of at most 16 CPUs each"),
        (
            ("--gpus=2", "--cpus-per-gpu=12"),
            "the CPUs and memory it asks per GPU fit 1 of its 2 GPUs on a node",
        ),
    ],
)
def test_a_job_one_node_cannot_hold_is_spread_over_nodes_as_slurm_does(
    ctl: Ctl, loop: Loop, ask: tuple[str, ...], why: str
) -> None:
    # plain Slurm ran both on two 16-CPU nodes with a GPU on each (tests/fixtures/slurm/
    # tasks_spread_over_nodes.txt); pinned to one node they were held again and placed again every
    # cycle, or rejected. (Only idle GPUs span two nodes in this controller's config.)
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-spread", *ask, "-q", "opportunistic")
    placed = _placed(ctl, jid)
    assert len(placed) == 2 and all(len(g) == 1 for g in placed.values())
    seen = {(ln.split()[2], ln.split()[3]) for ln in tasks}
    assert _by_host((h, [int(c)]) for h, c in seen) == placed
    assert f"runs on 2 nodes with 1 GPU(s) each: {why}" in ctl.placed_event(jid)


@pytest.mark.parametrize("client", ["sbatch", "srun"])
def test_an_overcommitted_job_runs_all_its_tasks_on_one_node_as_slurm_does(
    ctl: Ctl, loop: Loop, client: str
) -> None:
    # plain Slurm ran `-n 64 -O` on one node with one CPU (tests/fixtures/slurm/overcommit.txt); the plugin
    # refused it, as if its 64 tasks needed 4 nodes of cv's one whole-node cell
    ask = ("-n", "64", "--overcommit", "--gres=gpu:1")
    if client == "sbatch":
        jid, tasks = _sbatch_steps(ctl, "alice", f"{ctl.tag}-over", *ask)
    else:
        name = f"{ctl.tag}-overrun"
        proc = popen_as("alice", ["srun", "-J", name, *ask, "-t", "5",
                                  "bash", "-c", 'echo "task $SLURM_PROCID $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
        jid = _adopt(ctl, name)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        tasks = [ln for ln in out.splitlines() if ln.startswith("task ")]
    placed = _placed(ctl, jid)
    assert len(placed) == 1 and all(len(g) == 1 for g in placed.values())
    assert len(tasks) == 64
    seen = {(ln.split()[2], ln.split()[3]) for ln in tasks}
    assert _by_host((h, [int(c)]) for h, c in seen) == placed


def test_a_gpu_total_its_tasks_nodes_do_not_split_evenly_runs_on_the_same_gpus_on_each(
    ctl: Ctl, loop: Loop
) -> None:
    # plain Slurm ran -N 1-2 -n 32 --gpus=3 as 2 + 1 GPUs (tests/fixtures/slurm/
    # tasks_spread_over_nodes.txt); it was rejected here, as "3 GPUs do not split evenly"
    jid, tasks = _sbatch_steps(
        ctl, "bob", f"{ctl.tag}-odd", "-N", "1-2", "-n", "32", "--gpus=3", "-q", "opportunistic"
    )
    placed = _placed(ctl, jid)
    assert len(placed) == 2 and all(len(g) == 2 for g in placed.values())
    assert len(tasks) == 32
    seen = {(ln.split()[2], ln.split()[3]) for ln in tasks}
    assert all(set(map(int, cvd.split(","))) <= set(placed[host]) for host, cvd in seen)
    assert "runs on 2 nodes with 2 GPU(s) each (4 in all for the 3 it asks" in ctl.placed_event(jid)


def test_a_spread_job_runs_a_task_on_each_of_as_many_nodes_as_it_may_use(ctl: Ctl, loop: Loop) -> None:
    # plain Slurm ran -n 4 --gres=gpu:1 --spread-job on 4 nodes with a task and a GPU on each
    # (tests/fixtures/slurm/spread_job.txt); hivebatch ran it on one node. Idle GPUs reach all 4 here.
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-spreadjob", "-n", "4", "--gres=gpu:1", "--spread-job",
                               "-q", "opportunistic")  # fmt: skip
    placed = _placed(ctl, jid)
    assert len(placed) == 4 and all(len(g) == 1 for g in placed.values())
    assert sorted(ln.split()[2] for ln in tasks) == sorted(placed)


def test_a_jobs_gpu_variables_stay_and_its_srun_takes_every_gpu_of_its_nodes(ctl: Ctl, loop: Loop) -> None:
    # torchrun --nproc_per_node=$SLURM_GPUS_PER_NODE read an emptied variable; the inner srun reads
    # it back as --gpus-per-node=2 over two nodes, which the cli_filter asks as --gpus=4
    # (tests/fixtures/slurm/step_gpu_env.txt)
    name = f"{ctl.tag}-gpuenv"
    out = ctl.jobs_dir / f"{name}.out"
    # steps asking for themselves beside the per-node ask they read from the environment
    own = "srun -N 1 -n 1 --gpus=1 true && srun -N 1 -n 1 --gres=gpu:2 true && echo own-ok || echo own-failed"
    script = f'echo "per-node $SLURM_GPUS_PER_NODE"; {TASK_GPUS} && echo steps-ok || echo steps-failed; {own}'
    proc = run_as("bob", ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", "-N", "2",
                          "--gpus-per-node=2", "-q", "opportunistic", "--wrap", script])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = _output(ctl, jid, out, "own-")
    assert "per-node 2" in text and "steps-ok" in text and "own-ok" in text, text
    tasks = [ln.split()[2:] for ln in text.splitlines() if ln.startswith("task ")]
    assert _by_host((h, [int(c) for c in cvd.split(",")]) for h, cvd in tasks) == _placed(ctl, jid)


@pytest.mark.parametrize(
    "ask", [["--gpus=v100:2"], ["--gpus-per-node=v100:2"], ["-n", "2", "--gpus-per-task=v100:1"]]
)
def test_a_jobs_srun_runs_when_the_job_named_its_gpu_model(ctl: Ctl, loop: Loop, ask: list[str]) -> None:
    # the srun read the model back from SLURM_GPUS* and was refused "Step requested GRES (gpu:v100)
    # not found in the job": the pins are per-index types (tests/fixtures/slurm/step_typed_gpus.txt)
    tag = ask[-1].split("=")[0].strip("-")
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-typed-{tag}", *ask, "-q", "opportunistic")
    seen = [(ln.split()[2], [int(x) for x in ln.split()[3].split(",")]) for ln in tasks]
    assert {h: sorted(set(g)) for h, g in _by_host(seen).items()} == _placed(ctl, jid)


def test_a_jobs_srun_naming_a_model_the_cluster_lacks_is_refused_in_one_line(ctl: Ctl, loop: Loop) -> None:
    # with the model dropped inside a job, `srun --gpus=a100:1` in a v100 job ran on the job's GPUs;
    # Slurm refuses a step whose GPU type its job lacks (tests/fixtures/slurm/step_unknown_model.txt)
    name = f"{ctl.tag}-a100-step"
    out = ctl.jobs_dir / f"{name}.out"
    script = (
        "srun --gpus=a100:1 true 2>&1; echo a100-rc=$?; "
        'srun --gpus=v100:1 bash -c "echo v100 \\$CUDA_VISIBLE_DEVICES"; echo done-'
    )
    proc = run_as("bob", ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", "--gres=gpu:2",
                          "-q", "opportunistic", "--wrap", script])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = _output(ctl, jid, out, "done-")
    assert "srun: error: hivebatch: GPU type 'a100' in --gpus is not on this cluster (types: v100)" in text, (
        text
    )
    assert "a100-rc=1" in text, text
    (v100,) = [ln.split()[1] for ln in text.splitlines() if ln.startswith("v100 ")]
    (gpus,) = _placed(ctl, jid).values()
    assert int(v100) in gpus


def test_ranks_asking_a_gpu_each_over_two_nodes_run_eight_on_each(ctl: Ctl, loop: Loop) -> None:
    # `sbatch -n 16 --gpus-per-task=1` (MPI ranks): pinned to 2 x 8 GPUs, Slurm laid out 15 + 1 tasks
    # and the job's srun failed; TasksPerNode=8 gives each node the tasks its GPUs serve
    # (tests/fixtures/slurm/gpus_per_task_over_nodes.txt)
    jid, tasks = _sbatch_steps(
        ctl, "bob", f"{ctl.tag}-ranks", "-n", "16", "--gpus-per-task=1", "-q", "opportunistic"
    )
    placed = _placed(ctl, jid)
    seen = [(ln.split()[2], [int(ln.split()[3])]) for ln in tasks]
    assert len(seen) == 16 and len(placed) == 2
    assert {h: sorted(g) for h, g in _by_host(seen).items()} == placed


@pytest.mark.parametrize(
    ("ask", "each"), [(["-n", "32", "--gres=gpu:2"], 2), (["-n", "8", "-c", "4", "--gpus-per-node=3"], 3)]
)
def test_an_srun_whose_tasks_need_two_nodes_runs_on_both_with_its_gpus_on_each(
    ctl: Ctl, loop: Loop, ask: list[str], each: int
) -> None:
    # the cli_filter once asked such an srun for one node, where it was rejected, and then for its
    # per-node GPUs in all, split over the two nodes; plain Slurm gives them on each node
    # (tests/fixtures/slurm/srun_new_job_nodes.txt)
    name = f"{ctl.tag}-srunspread{each}"
    proc = popen_as("bob", ["srun", "-J", name, *ask, "-q", "opportunistic", "-t", "5",
                            "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert sorted(len(g) for g in _tasks_ran_on_placement(ctl, jid, out).values()) == [each, each]


@pytest.mark.parametrize(
    "ask",
    [
        ["-N", "2", "--gres=gpu:2"],
        ["-N", "2-2", "--gpus-per-node=2"],
        ["-w", "node[1-2]", "--gres=gpu:2"],
        ["-N", "2", "--gres=gpu:2", "-n", "4"],
    ],
)
def test_an_srun_on_two_nodes_gets_its_per_node_gpus_on_each(ctl: Ctl, loop: Loop, ask: list[str]) -> None:
    # plain Slurm gives 2 GPUs on each of the 2 nodes; hivebatch refused -N 2 (srun's own step cannot
    # ask per node on per-GPU pins) and ran -w node[1-2] with one on each, read as one node
    # (tests/fixtures/slurm/srun_new_job_nodes.txt). cli_filter.lua asks 2 per task, one task on
    # each node, or with more tasks all 4 as one total, which the plugin gives as 2 on each node
    name = f"{ctl.tag}-srun2n-{ask[0][1]}{ask[2][2:6]}{len(ask)}"
    proc = popen_as("bob", ["srun", "-J", name, *ask, "-q", "opportunistic", "-t", "5",
                            "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert sorted(len(g) for g in _tasks_ran_on_placement(ctl, jid, out).values()) == [2, 2]


@pytest.mark.parametrize(("nodes", "ran"), [("1-2", [2]), ("2-3", [2, 2])])
def test_an_srun_over_a_node_range_runs_on_its_fewest_nodes(
    ctl: Ctl, loop: Loop, nodes: str, ran: list[int]
) -> None:
    # refused before (srun's own step cannot ask per node on per-GPU pins); run on the fewest nodes of
    # the range, as the plugin runs sbatch's, and said so (tests/fixtures/slurm/node_range.txt)
    name = f"{ctl.tag}-srunrange{nodes[0]}"
    proc = popen_as("bob", ["srun", "-J", name, "-N", nodes, "--gres=gpu:2", "-q", "opportunistic", "-t", "5",
                            "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert f"srun: hivebatch: note: -N {nodes} runs on {len(ran)} nodes, the fewest it allows" in err
    assert sorted(len(g) for g in _tasks_ran_on_placement(ctl, jid, out).values()) == ran


def test_gpus_per_socket_run_packed_together_as_the_note_says(ctl: Ctl, loop: Loop) -> None:
    # plain Slurm gives GPUs 0 and 4, one per socket (tests/fixtures/slurm/gpus_per_socket_spread.txt)
    name = f"{ctl.tag}-socket"
    out = ctl.jobs_dir / f"{name}.out"
    proc = run_as("alice", ["sbatch", "--parsable", "-J", name, "-o", str(out), "-t", "5", "-N", "1",
                            "--sockets-per-node=2", "--gpus-per-socket=1",
                            "--wrap", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "hivebatch: note: --gpus-per-socket=1 counts as 2 GPUs on one node, placed as close" in proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    host, cvd = _output(ctl, jid, out, "gpus ").split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)
    (gpus,) = _placed(ctl, jid).values()
    assert len(gpus) == 2 and gpus[1] - gpus[0] == 1 and gpus[0] % 2 == 0  # one PCIe-switch pair


def test_a_gpu_job_no_node_could_ever_take_is_refused_at_submit_or_rejected_saying_why(ctl: Ctl) -> None:
    # plain Slurm refuses `sbatch --mem=999G` at submit but accepts it held (tests/fixtures/slurm/
    # held_impossible_accepted.txt, held_job_sizes.txt), and the plugin holds every GPU job: it makes
    # the test itself from the node sizes the controller writes, and accepts a job its owner holds
    ctl.cycle()  # the controller's node sizes file
    ask = [
        "-J",
        f"{ctl.tag}-huge",
        "--mem=999G",
        "--gres=gpu:1",
        "-t",
        "5",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    ]
    proc = run_as("alice", ["sbatch", "--parsable", *ask])
    assert proc.returncode != 0 and proc.stderr.splitlines()[0] == (
        "sbatch: error: hivebatch: the job needs 1022976 MB of memory on one node, but the largest node with "
        "GPUs has 64000 MB: ask for less (--mem, --mem-per-gpu, --mem-per-cpu)"
    ), proc.stderr
    proc = run_as("alice", ["sbatch", "--parsable", "--hold", *ask])
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    run_as("alice", ["scontrol", "release", str(jid)])
    ctl.until(lambda: ctl.job(jid).state == "rejected", what=lambda: ctl.job(jid).reason)
    reason = ctl.job(jid).reason or ""
    assert reason.startswith("can never run as asked: node1: has "), reason
    assert "MB memory, the job needs 1022976" in reason


def test_a_job_its_owner_holds_after_submitting_it_waits_until_they_release_it(ctl: Ctl) -> None:
    # `scontrol hold` by the owner looks to Slurm like the plugin's own hold: the controller used to
    # place and release such a job within two seconds
    proc = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-uhold", "--gres=gpu:1", "-t", "5",
                            "-o", "/dev/null", "--wrap", "sleep 30"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    held = run_as("alice", ["scontrol", "hold", str(jid)])
    assert held.returncode == 0, held.stderr
    ctl.mine.add(jid)
    for _ in range(3):
        ctl.cycle()
    assert (ctl.job(jid).reason or "").startswith("held by its owner"), ctl.job(jid).reason
    (sj,) = ctl.lab.backend().list_jobs([jid])
    assert sj.state == "PENDING" and sj.held and not ctl.job(jid).placement
    released = run_as("alice", ["scontrol", "release", str(jid)])
    assert released.returncode == 0, released.stderr
    ctl.until(lambda: ctl.job(jid).state == "running", what=lambda: ctl.job(jid).reason)


def test_an_srun_inside_a_mem_per_gpu_job_runs(ctl: Ctl, loop: Loop) -> None:
    # without hivebatch's TaskProlog every such srun stopped: SLURM_MEM_PER_GPU and SLURM_MEM_PER_NODE
    jid, tasks = _sbatch_steps(ctl, "carol", f"{ctl.tag}-memgpu", "--gpus=2", "--mem-per-gpu=1000",
                               "--cpus-per-gpu=1")  # fmt: skip
    [line] = tasks
    _, _, host, cvd = line.split()
    assert _gpus_line(host, cvd) == _placed(ctl, jid)


def test_an_srun_inside_an_exclusive_gpu_job_runs_on_all_its_gpus(ctl: Ctl, loop: Loop) -> None:
    # pinned as a plain count, such a step was refused (tests/fixtures/slurm/exclusive_step_gres.txt)
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-excl", "--exclusive", "-N", "1", "--gres=gpu:8")
    [line] = tasks
    _, _, host, cvd = line.split()
    assert _gpus_line(host, cvd) == _placed(ctl, jid) == {host: list(range(8))}


def test_an_exclusive_user_job_takes_a_whole_node_and_runs_beside_no_other_users_job(
    ctl: Ctl, loop: Loop
) -> None:
    # Slurm keeps a --exclusive=user job off nodes where other users' jobs run: pinned to one GPU beside
    # alice's job, it stayed pending on "Resources" (tests/fixtures/slurm/exclusive_user.txt)
    name = f"{ctl.tag}-other"
    proc = run_as("alice", ["sbatch", "--parsable", "-J", name, "-o", "/dev/null", "-t", "5", "--gres=gpu:1",
                            "--wrap", "sleep 60"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    other = int(proc.stdout.strip())
    ctl.mine.add(other)
    jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-exuser", "--exclusive=user", "--gres=gpu:1")
    [line] = tasks
    _, _, host, cvd = line.split()
    assert _gpus_line(host, cvd) == _placed(ctl, jid) == {host: list(range(8))}
    assert host not in _placed(ctl, other)
    run_as("alice", ["scancel", str(other)])


def test_a_job_its_owner_niced_lets_the_next_one_start_first(ctl: Ctl, loop: Loop) -> None:
    # plain Slurm started the later of two jobs first when the earlier had --nice=100
    # (tests/fixtures/slurm/nice_order.txt); the controller started them in arrival order
    def submit(name: str, *opts: str, run: str) -> tuple[int, Path]:
        out = ctl.jobs_dir / f"{ctl.tag}-{name}.out"
        proc = run_as("bob", ["sbatch", "--parsable", "-J", f"{ctl.tag}-{name}", "-o", str(out), "-t", "5",
                              "--gres=gpu:8", *opts, "--wrap", run])  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        jid = int(proc.stdout.strip())
        ctl.mine.add(jid)
        return jid, out

    blocker, _ = submit("blocker", run="sleep 6")
    ctl.lab.wait_for(blocker, ["RUNNING"], timeout_s=30, held=False)
    niced, niced_out = submit("niced", "--nice=100", run="date +started=%s.%N")
    plain, plain_out = submit("plain", run="date +started=%s.%N; sleep 2")
    started = {
        jid: float(ctl.lab.wait_for_file(out, "started=").split("started=", 1)[1].split()[0])
        for jid, out in ((niced, niced_out), (plain, plain_out))
    }
    assert started[plain] < started[niced]


def test_a_job_with_a_nodelist_runs_on_the_node_it_lists(ctl: Ctl, loop: Loop) -> None:
    # the pin replaces the job's node list in Slurm, so the plugin keeps the owner's in the request; on
    # an idle lab the cells would choose node1 (seen: `-w node3` ran on node1)
    name = f"{ctl.tag}-nodelist"
    out = ctl.jobs_dir / f"{name}.out"
    proc = run_as("alice", ["sbatch", "--parsable", "-J", name, "-w", "node4", "--gres=gpu:1", "-o", str(out),
                            "-t", "5", "--wrap", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = _output(ctl, jid, out, "gpus ")
    host, cvd = text.split("gpus ", 1)[1].split()[:2]
    assert host == "node4" and _gpus_line(host, cvd) == _placed(ctl, jid)


def _tasks_ran_on_placement(ctl: Ctl, jid: int, out: str) -> dict[str, list[int]]:
    """The GPUs the tasks printed on each node ("gpus HOST CVD") are the ledger's placement, returned."""
    seen = {tuple(ln.split()[1:3]) for ln in out.splitlines() if ln.startswith("gpus ")}
    placed = _placed(ctl, jid)
    assert _by_host((h, [int(c) for c in cvd.split(",")]) for h, cvd in seen) == placed
    return placed


def _by_host(pairs: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for host, gpus in pairs:
        out.setdefault(host, []).extend(gpus)
    return out


def test_snakemake_style_sbatch_line_runs_on_the_cells_choice(ctl: Ctl, loop: Loop) -> None:
    # the command line snakemake-executor-plugin-slurm builds for a rule with gpu=1 (one job per rule run)
    name = f"{ctl.tag}-smk"
    log = ctl.jobs_dir / f"{name}.log"
    argv = ["sbatch", "--parsable", "--job-name", name, "--output", str(log), "--export=ALL",
            "--comment", "rule_train_wildcards_seed=1", "-A", "cv", "-p", "gpu", "-t", "5", "--mem", "1000",
            "--ntasks=1", "--cpus-per-task=1", "--gpus=1", "-D", str(ctl.jobs_dir),
            "--wrap", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"']  # fmt: skip
    proc = run_as("alice", argv)
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    text = ctl.lab.wait_for_file(log, "gpus ", timeout_s=60)
    host, cvd = text.split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)


@pytest.fixture(scope="session")
def tools_python(slurm_lab: Any) -> str:
    """A Python every lab user can run, with submitit and dask-jobqueue installed (built once)."""
    venv = Path(slurm_lab.dir) / "venv-tools"
    stamp = venv / ".tools"
    if not stamp.exists() or stamp.read_text() != " ".join(TOOLS):
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *TOOLS], capture_output=True, text=True,
                             timeout=600, check=False)  # fmt: skip
        assert pip.returncode == 0, f"installing {TOOLS} failed: {pip.stderr[-800:]}"
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
        stamp.write_text(" ".join(TOOLS))
    return str(venv / "bin" / "python")


SUBMITIT = """
import os, socket, sys, submitit
def where():
    return socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", "")
ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(name=sys.argv[2], slurm_gpus_per_node=2, timeout_min=5, slurm_mem="1G")
job = ex.submit(where)
print("job", job.job_id, flush=True)
host, cvd = job.result()
print("gpus", host, cvd)
"""


def test_submitit_job_runs_on_the_cells_choice(ctl: Ctl, loop: Loop, tools_python: str) -> None:
    name = f"{ctl.tag}-submitit"
    folder = ctl.jobs_dir / name
    folder.mkdir()
    folder.chmod(0o777)  # the client runs as bob
    proc = popen_as("bob", [tools_python, "-c", SUBMITIT, str(folder), name], cwd=ctl.jobs_dir)  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    host, cvd = out.split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)


DASK = """
import os, socket, sys
from dask.distributed import Client
from dask_jobqueue import SLURMCluster
cluster = SLURMCluster(cores=1, memory="1GB", processes=1, walltime="00:05:00", job_name=sys.argv[1],
                       log_directory=sys.argv[2], job_extra_directives=["--gres=gpu:1"],
                       scheduler_options={"host": "127.0.0.1"}, worker_extra_args=["--nthreads", "1"])
cluster.scale(jobs=1)
client = Client(cluster)
client.wait_for_workers(1, timeout=120)
host, cvd = client.submit(lambda: (socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", ""))).result()
print("gpus", host, cvd, flush=True)
client.close()
cluster.close()
"""


def test_dask_jobqueue_worker_runs_on_the_cells_choice(ctl: Ctl, loop: Loop, tools_python: str) -> None:
    name = f"{ctl.tag}-dask"
    logs = ctl.jobs_dir / name
    logs.mkdir()
    logs.chmod(0o777)  # the client runs as carol
    proc = popen_as("carol", [tools_python, "-c", DASK, name, str(logs)], cwd=ctl.jobs_dir)  # fmt: skip
    jid = _adopt(ctl, name, timeout_s=60)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    host, cvd = out.split("gpus ", 1)[1].split()[:2]
    assert _gpus_line(host, cvd) == _placed(ctl, jid)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def _srun_gpus(ctl: Ctl, name: str, *opts: str) -> tuple[int, str]:
    """bob's opportunistic srun whose tasks each print "gpus HOST CVD", once it ended well: its id and output."""
    proc = popen_as("bob", ["srun", "-J", name, *opts, "-q", "opportunistic", "-t", "5",
                            "bash", "-c", 'echo "gpus $(hostname) $CUDA_VISIBLE_DEVICES"'])  # fmt: skip
    jid = _adopt(ctl, name)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    return jid, out


def test_a_partitions_cap_on_cpus_per_node_spreads_and_refuses_as_slurm_does(ctl: Ctl, loop: Loop) -> None:
    # with MaxCPUsPerNode=8 plain Slurm ran `srun -p small -n 16 --gres=gpu:2` with 8 tasks and 2 GPUs on
    # each of two nodes and refused `-N 1 -c 12` at submit; through hivebatch each was pinned to one node,
    # held again as BadConstraints, and srun waited until killed (partition_max_cpus.txt)
    with lab_partition("small", "Nodes=node3,node4", "MaxCPUsPerNode=8") as small:
        name = f"{ctl.tag}-capped"
        jid, out = _srun_gpus(ctl, name, "-p", small, "-n", "16", "--gres=gpu:2")
        ran = _tasks_ran_on_placement(ctl, jid, out)
        assert sorted(ran) == ["node3", "node4"] and [len(g) for g in ran.values()] == [2, 2]
        eight_each = 8 * ["node3"] + 8 * ["node4"]
        assert sorted(ln.split()[1] for ln in out.splitlines() if ln.startswith("gpus ")) == eight_each
        # sbatch has no filter: the controller spreads the tasks by the cap
        ask = ("-p", small, "-n", "16", "--gres=gpu:2", "-q", "opportunistic")
        jid, tasks = _sbatch_steps(ctl, "bob", f"{name}-b", *ask)
        assert sorted(_placed(ctl, jid)) == ["node3", "node4"]
        assert sorted(ln.split()[2] for ln in tasks) == eight_each
        assert "its 16 CPUs need 2 nodes of at most 8 CPUs each" in ctl.placed_event(jid)
        # by now the loop's cycles have written the node sizes file the plugin measures against
        refused = run_as(
            "alice", ["srun", "-p", small, "-N", "1", "-c", "12", "--gres=gpu:1", "-t", "5", "true"]
        )
        assert refused.returncode != 0
        assert (
            "srun: error: hivebatch: the job needs 12 CPUs on one node, but partition small lets a job use 8 CPUs"
            " of a node (MaxCPUsPerNode)" in refused.stderr
        ), refused.stderr
        batch = run_as(
            "alice", ["sbatch", "-p", small, "-n", "16", "--gres=gpu:2", "-t", "5", "--wrap", "true"]
        )
        assert batch.returncode != 0
        assert "sbatch: error: hivebatch: its 16 CPUs need 2 nodes of at most 8 CPUs each" in batch.stderr, (
            batch.stderr
        )


def _seen(ctl: Ctl, check: Any, what: Any) -> None:
    """Wait until the loop's cycles make ``check()`` true (the loop cycles; a test cycling too would race it)."""
    deadline = time.monotonic() + 60
    while not _holds(check):
        assert time.monotonic() < deadline, what()
        time.sleep(0.5)


def _holds(check: Any) -> bool:
    try:
        return bool(check())
    except NoResultFound:  # not in the ledger before the loop's next cycle
        return False


def test_a_partitions_node_limits_are_kept_as_slurm_keeps_them(ctl: Ctl, loop: Loop) -> None:
    # plain Slurm ran `srun --gres=gpu:2` with 2 GPUs on each of two nodes in MinNodes=2, refused tasks
    # needing two nodes in MaxNodes=1 and left -N 2 there pending; through hivebatch each was pinned as
    # asked and never started (partition_node_limits.txt)
    with lab_partition("two", "Nodes=node3,node4", "MinNodes=2") as two:
        jid, out = _srun_gpus(ctl, f"{ctl.tag}-minnodes", "-p", two, "--gres=gpu:2")
        ran = _tasks_ran_on_placement(ctl, jid, out)
        assert sorted(ran) == ["node3", "node4"] and [len(g) for g in ran.values()] == [2, 2]
    with lab_partition("one", "Nodes=node3,node4", "MaxNodes=1") as one:
        refused = run_as(
            "alice", ["sbatch", "-p", one, "-n", "32", "--gres=gpu:1", "-t", "5", "--wrap", "true"]
        )
        assert refused.returncode != 0
        assert (
            "sbatch: error: hivebatch: its 32 CPUs need 2 nodes of at most 16 CPUs each, and Slurm runs a job on"
            " at most 1 there (partition one's MaxNodes is 1)" in refused.stderr
        ), refused.stderr
        told = "it needs 2 nodes, more than Slurm allows: partition one's MaxNodes is 1; lower it (scontrol update job {jid} NumNodes=1) or cancel it"
        jid = _waits_until_changed(
            ctl, "bob", ["-p", one, "-N", "2", "--gres=gpu:1", "-q", "opportunistic"], told, "NumNodes=1"
        )
        assert len(_placed(ctl, jid)) == 1


def test_a_partitions_cap_on_memory_per_node_spreads_and_rejects_as_slurm_does(ctl: Ctl, loop: Loop) -> None:
    # with MaxMemPerNode=30000 plain Slurm ran `-n 16 --mem-per-cpu=3000` on two nodes and left --mem=40000
    # pending for ever; Slurm refused hivebatch's pins of both every cycle (partition_max_mem.txt)
    with lab_partition("capmem", "Nodes=node3,node4", "MaxMemPerNode=30000") as capmem:
        ask = ("-p", capmem, "-n", "16", "--mem-per-cpu=3000", "--gres=gpu:1", "-q", "opportunistic")
        jid, tasks = _sbatch_steps(ctl, "bob", f"{ctl.tag}-capmem", *ask)
        assert sorted(_placed(ctl, jid)) == ["node3", "node4"]
        assert sorted(ln.split()[2] for ln in tasks) == 8 * ["node3"] + 8 * ["node4"]
        proc = run_as("bob", ["sbatch", "--parsable", "-p", capmem, "--mem=40000", "--gres=gpu:1", "-t", "5",
                              "-o", "/dev/null", "--wrap", "true"])  # fmt: skip
        assert proc.returncode == 0, proc.stderr  # Slurm accepts it too
        big = int(proc.stdout.strip())
        ctl.mine.add(big)
        _seen(ctl, lambda: ctl.job(big).state == "rejected", what=lambda: ctl.job(big).reason)
        reason = ctl.job(big).reason or ""
        assert reason.startswith(
            "can never run as asked: node3: partition capmem lets a job use 30000 MB of its memory (MaxMemPerNode), "
            "the job needs 40000; node4: "
        ), reason
        assert ctl.events(big, "act_failed") == []
        # in cv, whose one whole-node cell cannot hold the spread, the plugin refuses it at submit
        refused = run_as("alice", ["sbatch", *ask[:-2], "-t", "5", "--wrap", "true"])
        assert refused.returncode != 0
        assert (
            "sbatch: error: hivebatch: its 16 tasks of 3000 MB memory (--mem-per-cpu) need 2 nodes of at most 30000 MB"
            " each" in refused.stderr
        ), refused.stderr


def _waits_until_changed(ctl: Ctl, user: str, opts: list[str], told: str, change: str) -> int:
    """A GPU job the loop keeps waiting, holding no GPUs, with the reason ``told`` (its ``{jid}`` filled in),
    until its owner makes the ``change`` it names; then it runs. Its id."""
    proc = run_as(user, ["sbatch", "--parsable", *opts, "-t", "5", "-o", "/dev/null", "--wrap", "sleep 30"])
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    want = told.format(jid=jid)
    _seen(ctl, lambda: ctl.job(jid).reason == want, what=lambda: (ctl.job(jid).reason, want))
    assert not ctl.job(jid).placement
    assert run_as(user, ["scontrol", "update", f"job={jid}", change]).returncode == 0
    _seen(ctl, lambda: ctl.job(jid).state == "running", what=lambda: ctl.job(jid).reason)
    return jid


def test_a_job_its_partition_keeps_out_holds_no_gpus_until_its_owner_moves_it(ctl: Ctl, loop: Loop) -> None:
    # Slurm accepted alice's job in a partition of AllowAccounts=nlp and left it pending for ever, and
    # hivebatch placed it on cv's cells (partition_access.txt)
    with lab_partition("nlponly", "Nodes=node3,node4", "AllowAccounts=nlp") as nlponly:
        told = (
            f"Slurm never starts it where it asked: partition {nlponly} allows account nlp not cv; "
            "move it (scontrol update job {jid} Partition=...) or cancel it"
        )
        _waits_until_changed(ctl, "alice", ["-p", nlponly, "--gres=gpu:1"], told, "Partition=gpu")


def test_jobs_share_cpus_as_their_partitions_oversubscribe_lets_them(ctl: Ctl, loop: Loop) -> None:
    # with OverSubscribe=FORCE:3 plain Slurm ran three 16-CPU GPU jobs on each 16-CPU node; through hivebatch
    # one ran and the rest waited, "node3: 0 CPUs free, the job needs 16" (partition_oversubscribe.txt)
    with lab_partition("shared", "Nodes=node3,node4", "OverSubscribe=FORCE:3") as shared:
        ask = ["-p", shared, "-w", "node3", "-c", "16", "--mem=1000", "--gres=gpu:1", "-q", "opportunistic",
               "-t", "5", "-o", "/dev/null", "--wrap", "sleep 120"]  # fmt: skip
        jids = []
        for _ in range(4):
            proc = run_as("bob", ["sbatch", "--parsable", *ask])
            assert proc.returncode == 0, proc.stderr
            jids.append(int(proc.stdout.strip()))
        ctl.mine.update(jids)
        *three, fourth = jids
        _seen(
            ctl,
            lambda: all(ctl.job(j).state == "running" for j in three),
            what=lambda: ctl.job(three[-1]).reason,
        )
        want = (
            "node3: 0 CPUs free, even with 3 jobs sharing a CPU as partition shared lets them (OverSubscribe)"
        )
        _seen(ctl, lambda: want in (ctl.job(fourth).reason or ""), what=lambda: ctl.job(fourth).reason)
        assert not ctl.job(fourth).placement
        assert all(ctl.events(j, "act_failed") == [] for j in jids)


def _sbatch_held(ctl: Ctl, user: str, *opts: str) -> int:
    """``user``'s opportunistic one-GPU sleep, submitted: its id."""
    proc = run_as(user, ["sbatch", "--parsable", *opts, "--gres=gpu:1", "-q", "opportunistic", "-t", "5",
                         "-o", "/dev/null", "--wrap", "sleep 120"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    jid = int(proc.stdout.strip())
    ctl.mine.add(jid)
    return jid


def test_a_node_a_job_of_an_exclusive_user_partition_holds_is_left_to_its_user(ctl: Ctl, loop: Loop) -> None:
    # plain Slurm kept other users' jobs off a node running a job of an ExclusiveUser=YES partition; through
    # hivebatch bob's jobs were pinned beside alice's and waited there holding cells (partition_exclusive_user.txt)
    with lab_partition("mine", "Nodes=node3,node4", "ExclusiveUser=YES") as mine:
        alices = _sbatch_held(ctl, "alice", "-p", mine, "-w", "node3")
        _seen(ctl, lambda: ctl.job(alices).state == "running", what=lambda: ctl.job(alices).reason)
        bobs = _sbatch_held(ctl, "bob", "-p", mine, "-w", "node3")
        want = "node3: user alice's alone while their job of an ExclusiveUser partition runs there"
        _seen(ctl, lambda: want in (ctl.job(bobs).reason or ""), what=lambda: ctl.job(bobs).reason)
        assert not ctl.job(bobs).placement
        # on the other node bob's job runs, and then keeps alice's next job of the partition off it
        other = _sbatch_held(ctl, "bob", "-p", mine, "-w", "node4")
        _seen(ctl, lambda: ctl.job(other).state == "running", what=lambda: ctl.job(other).reason)
        second = _sbatch_held(ctl, "alice", "-p", mine, "-w", "node4")
        want = "node4: user bob's alone while their job of an ExclusiveUser partition runs there"
        _seen(ctl, lambda: want in (ctl.job(second).reason or ""), what=lambda: ctl.job(second).reason)
        assert all(ctl.events(j, "act_failed") == [] for j in (alices, bobs, other, second))


def test_an_opportunistic_job_keeping_a_node_to_its_user_leaves_it_for_a_guaranteed_job(
    ctl: Ctl, loop: Loop
) -> None:
    # plain Slurm requeued nothing for root's normal job while hbctl's opportunistic job of an ExclusiveUser
    # partition held node3; through hivebatch bob's guaranteed job waited there without a placement for as
    # long as alice's opportunistic job ran (exclusive_user_opportunistic.txt)
    with lab_partition("mine", "Nodes=node3,node4", "ExclusiveUser=YES") as mine:
        # its notice is 5 s (its script's --signal), which it sits out: the controller requeues it at the end
        script = ctl.jobs_dir / f"{ctl.tag}-sits-out.sh"
        script.write_text("#!/bin/sh\n#SBATCH --signal=B:USR1@5\ntrap '' USR1\nsleep 120\n")
        script.chmod(0o644)
        proc = run_as("alice", ["sbatch", "--parsable", "-p", mine, "-w", "node3", "--gres=gpu:1", "-q", "opportunistic",
                                "-t", "5", "-o", "/dev/null", str(script)])  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        alices = int(proc.stdout.strip())
        ctl.mine.add(alices)
        _seen(ctl, lambda: ctl.job(alices).state == "running", what=lambda: ctl.job(alices).reason)
        proc = run_as("bob", ["sbatch", "--parsable", "-w", "node3", "--gres=gpu:1", "-t", "5", "-o", "/dev/null",
                              "--wrap", "sleep 30"])  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        bobs = int(proc.stdout.strip())
        ctl.mine.add(bobs)
        _seen(ctl, lambda: ctl.job(bobs).state == "running", what=lambda: ctl.job(bobs).reason)
        assert list(ctl.job(bobs).placement) == ["node3"]
        [told] = ctl.events(alices, "notice")
        assert told.startswith("told to leave: SIGUSR1")
        [left] = ctl.events(alices, "preempted")
        assert f"job {bobs} needs node3, which its ExclusiveUser partition keeps to one user" in left
        assert ctl.job(alices).state in ("preempted", "queued", "placed")  # requeued, not ended


def test_jobs_asking_for_licenses_wait_for_them_without_gpus(ctl: Ctl, loop: Loop) -> None:
    # the lab counts Licenses=matlab:2; through hivebatch a -L job pinned while another held the licenses
    # waited on Licenses with its GPU held for as long as that one ran (licenses.txt)
    jids = []
    for _ in range(3):
        proc = run_as("bob", ["sbatch", "--parsable", "-L", "matlab:2", "--gres=gpu:1", "-t", "5", "-o", "/dev/null",
                              "--wrap", "sleep 6"])  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        jids.append(int(proc.stdout.strip()))
    ctl.mine.update(jids)
    most, told = 0, set()
    deadline = time.monotonic() + 90
    while not all(_holds(lambda j=j: ctl.job(j).state == "done") for j in jids):
        assert time.monotonic() < deadline, [(ctl.job(j).state, ctl.job(j).reason) for j in jids]
        rows = [ctl.job(j) for j in jids if _holds(lambda j=j: ctl.job(j))]
        most = max(most, sum(r.state == "running" for r in rows))
        for r in rows:
            if (r.reason or "").startswith("waits for licenses: matlab ("):
                told.add(r.slurm_job_id)
                assert not r.placement
        time.sleep(0.5)
    assert most == 1 and len(told) >= 2, (most, told)
    assert all(ctl.events(j, "act_failed") == [] for j in jids)
