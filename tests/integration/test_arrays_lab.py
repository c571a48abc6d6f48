"""Array jobs on the real lab: each task is placed on GPUs of its own and the ``%`` throttle holds."""

from __future__ import annotations

import re

import pytest
from lab_controller import Ctl
from lab_users import run_as

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]


def test_array_tasks_run_each_on_their_own_gpu_within_the_throttle(ctl: Ctl) -> None:
    out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-arr", "--array=0-3%2", "--gres=gpu:1",
                           "-t", "5", "--chdir", str(ctl.jobs_dir), "-o", f"{ctl.tag}-arr-%A_%a.out",
                           "--wrap", 'echo "task=$SLURM_ARRAY_TASK_ID host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES"; sleep 4'],
                 timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    array = int(out.stdout.strip())
    ctl.mine.add(array)
    most_running = 0

    def all_done() -> bool:
        nonlocal most_running
        tasks = [j for j in ctl.backend.inner.list_jobs() if j.array_job_id == array]
        most_running = max(most_running, sum(1 for j in tasks if j.state == "RUNNING"))
        done = [j for j in tasks if j.state == "COMPLETED" and j.array_task_id is not None]
        return len(done) == 4

    ctl.until(all_done, timeout_s=150, what=lambda: [
        (j.display_id, j.state, j.reason) for j in ctl.backend.inner.list_jobs() if j.array_job_id == array])  # fmt: skip
    assert most_running <= 2
    ctl.cycle()  # Slurm shows the last task done; one more cycle lets the ledger see it too
    seen = {}
    for task in range(4):
        text = ctl.lab.wait_for_file(ctl.jobs_dir / f"{ctl.tag}-arr-{array}_{task}.out", "cvd=")
        m = re.search(r"task=(\d+) host=(\S+) cvd=(\d+)$", text.strip())
        assert m, text
        seen[int(m.group(1))] = (m.group(2), int(m.group(3)))
    assert sorted(seen) == [0, 1, 2, 3]
    # every task ran on the GPU the cells chose for it, as a job of its own in the ledger
    tasks = {j.array_task_id: j.job_id for j in ctl.backend.inner.list_jobs() if j.array_job_id == array}
    for task, jid in tasks.items():
        ((node, idx),) = ctl.job(jid).placement.items()
        assert seen[task] == (node, idx[0]) and ctl.job(jid).state == "done"


def test_an_array_of_one_task_runs_on_the_gpu_the_cells_chose(ctl: Ctl) -> None:
    # Slurm keeps it as 520_[3] until it starts and splits nothing off it; it waited for a split for ever
    # (tests/fixtures/slurm/array_single_task.txt)
    out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-one", "--array=3", "--gres=gpu:1", "-t", "5",
                           "--chdir", str(ctl.jobs_dir), "-o", f"{ctl.tag}-one-%A_%a.out",
                           "--wrap", 'echo "task=$SLURM_ARRAY_TASK_ID cvd=$CUDA_VISIBLE_DEVICES"'], timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    array = int(out.stdout.strip())
    ctl.mine.add(array)
    ctl.until(
        lambda: ctl.job(array).state in ("placed", "running", "done"), what=lambda: ctl.job(array).reason
    )
    text = ctl.lab.wait_for_file(ctl.jobs_dir / f"{ctl.tag}-one-{array}_3.out", "cvd=")
    ((node, idx),) = ctl.job(array).placement.items()
    assert f"task=3 cvd={idx[0]}" in text and len(idx) == 1


def test_an_array_its_owner_holds_waits_for_their_release(ctl: Ctl) -> None:
    # plain Slurm keeps it held; the controller's split, an admin's hold to Slurm, let its tasks be placed
    # without the owner's release (tests/fixtures/slurm/array_owner_hold.txt)
    out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-harr", "--array=0-1", "--hold", "--gres=gpu:1",
                           "-t", "5", "-o", "/dev/null", "--wrap", "sleep 2"], timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    array = int(out.stdout.strip())
    ctl.mine.add(array)
    for _ in range(3):
        ctl.cycle()
    tasks = [j for j in ctl.backend.inner.list_jobs() if j.array_job_id == array]
    assert [j.reason for j in tasks] == ["JobHeldUser"] and tasks[0].array_pending  # one record, not split
    assert (
        ctl.job(array).reason
        == f"held by its owner: scontrol release {tasks[0].display_id} lets hivebatch place it"
    )
    assert run_as("alice", ["scontrol", "release", str(array)]).returncode == 0

    def both_done() -> bool:
        ctl.mine.update(j.job_id for j in ctl.backend.inner.list_jobs() if j.array_job_id == array)
        done = [
            j for j in ctl.backend.inner.list_jobs() if j.array_job_id == array and j.state == "COMPLETED"
        ]
        return len(done) == 2

    ctl.until(both_done, timeout_s=90, what="the released array's two tasks to complete")


def _array_behind_full_cv(ctl: Ctl, name: str, tasks: str, wrap: str) -> tuple[list[int], int]:
    """alice's jobs on all of cv's GPUs, then her one-GPU array, whose tasks wait split off: (those jobs, the
    array's id)."""
    blockers = []
    for gpus in (8, 4):
        out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-full", f"--gres=gpu:{gpus}", "-t", "5",
                               "-o", "/dev/null", "--wrap", "sleep 300"], timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        blockers.append(int(out.stdout.strip()))
    ctl.mine.update(blockers)
    out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-{name}", f"--array={tasks}", "--gres=gpu:1",
                           "-t", "5", "-o", "/dev/null", "--wrap", wrap], timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    array = int(out.stdout.strip())
    ctl.mine.add(array)
    return blockers, array


def test_a_split_task_its_owner_holds_waits_for_their_release(ctl: Ctl) -> None:
    # Slurm ignores an owner's hold of a task the controller holds already (split off, an admin's hold to
    # Slurm), so the task was placed with the others (tests/fixtures/slurm/owner_hold_of_held.txt)
    blockers, array = _array_behind_full_cv(ctl, "tarr", "0-1", "sleep 2")

    def tasks() -> dict[int, int]:
        found = {
            j.array_task_id: j.job_id
            for j in ctl.backend.inner.list_jobs()
            if j.array_job_id == array and j.array_task_id is not None
        }
        ctl.mine.update(found.values())
        return found

    ctl.until(lambda: len(tasks()) == 2, what="the array's tasks to be split off")
    task = tasks()[1]
    assert run_as("alice", ["scontrol", "hold", f"{array}_1"]).returncode == 0
    ctl.cycle()
    (listed,) = ctl.lab.backend().list_jobs([task])
    assert listed.reason == "JobHeldUser"
    assert ctl.job(task).reason == f"held by its owner: scontrol release {array}_1 lets hivebatch place it"
    assert run_as("alice", ["scancel", *map(str, blockers)]).returncode == 0
    ctl.until(lambda: ctl.job(tasks()[0]).state == "done", timeout_s=90, what="the other task to run")
    assert ctl.job(task).state == "queued" and not ctl.job(task).placement
    assert run_as("alice", ["scontrol", "release", f"{array}_1"]).returncode == 0
    ctl.until(
        lambda: ctl.job(task).state in ("running", "done"), timeout_s=60, what=lambda: ctl.job(task).reason
    )


def test_the_owners_hold_of_a_whole_array_holds_every_task_until_they_release_it(ctl: Ctl) -> None:
    # one update over the array's records: a site factor the plugin wrote for one record was carried to
    # the next and refused as the owner's own, so every other split task stayed unheld
    # (tests/fixtures/slurm/owner_start_time.txt)
    blockers, array = _array_behind_full_cv(ctl, "warr", "0-3", "sleep 1")

    def tasks() -> list:
        found = [j for j in ctl.backend.inner.list_jobs() if j.array_job_id == array]
        ctl.mine.update(j.job_id for j in found)
        return found

    ctl.until(lambda: sum(j.array_task_id is not None for j in tasks()) >= 2, what="tasks to be split off")
    held = run_as("alice", ["scontrol", "hold", str(array)])
    assert held.returncode == 0, held.stderr
    assert run_as("alice", ["scancel", *map(str, blockers)]).returncode == 0
    for _ in range(4):
        ctl.cycle()
    assert tasks() and all(j.state == "PENDING" and j.reason == "JobHeldUser" for j in tasks())
    assert run_as("alice", ["scontrol", "release", str(array)]).returncode == 0

    def all_done() -> bool:
        done = [j for j in tasks() if j.state == "COMPLETED" and j.array_task_id is not None]
        return len(done) == 4

    ctl.until(all_done, timeout_s=120, what=lambda: [(j.display_id, j.state, j.reason) for j in tasks()])


def test_the_owner_excludes_a_node_from_an_array_whose_first_tasks_run(ctl: Ctl) -> None:
    # plain Slurm updates the pending tasks and refuses the running ones in its own words; the plugin
    # refused all of the update (tests/fixtures/slurm/owner_exclude_nodes.txt)
    out = run_as("alice", ["sbatch", "--parsable", "-J", f"{ctl.tag}-arx", "--array=0-3%2", "--gres=gpu:1",
                           "-t", "5", "--chdir", str(ctl.jobs_dir), "-o", "/dev/null", "--wrap", "sleep 6"],
                 timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    array = int(out.stdout.strip())
    ctl.mine.add(array)

    def tasks() -> list:  # type: ignore[type-arg]
        return [j for j in ctl.backend.inner.list_jobs() if j.array_job_id == array]

    ctl.until(
        lambda: sum(j.state == "RUNNING" for j in tasks()) == 2,
        what=lambda: [(j.display_id, j.state) for j in tasks()],
    )
    busy = sorted({n for j in tasks() if j.state == "RUNNING" for n in j.nodes})
    upd = run_as("alice", ["scontrol", "update", f"JobId={array}", f"ExcNodeList={','.join(busy)}"])
    assert upd.returncode != 0 and "Job is no longer pending execution" in upd.stderr, upd.stderr
    assert "denied" not in upd.stderr, upd.stderr
    ctl.until(lambda: sum(j.state == "COMPLETED" and j.array_task_id is not None for j in tasks()) == 4,
              timeout_s=150, what=lambda: [(j.display_id, j.state, j.reason) for j in tasks()])  # fmt: skip
    later = [j.job_id for j in tasks() if j.array_task_id in (2, 3)]
    assert len(later) == 2 and not any(set(busy) & set(ctl.job(jid).placement or {}) for jid in later)
