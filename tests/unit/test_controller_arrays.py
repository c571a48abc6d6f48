"""Array jobs: each task is placed as a job of its own, within the array's ``%`` throttle (fake Slurm,
which splits and throttles tasks as the lab's slurmctld does: tests/fixtures/slurm/squeue_array_split.json)."""

from __future__ import annotations

import pytest
from controller_support import make_env

from hivebatch.controller.decide.arrays import SPLIT_AHEAD
from hivebatch.slurm.arrays import array_tasks, array_text
from hivebatch.slurm.parse import parse_squeue_json
from hivebatch.slurm.types import SlurmError


def _tasks(env, array_id):
    return sorted(
        (j for j in env.ctl.list_jobs() if j.array_job_id == array_id and j.array_task_id is not None),
        key=lambda j: j.array_task_id,
    )


def test_each_task_gets_its_own_gpus_and_the_throttle_holds(tmp_path):
    env = make_env(tmp_path)
    array = env.submit("alice", "cv", 1, extra=["--array=0-5%2"])
    env.cycle()  # splits two tasks off (the throttle's room); the rest stay in the array's record
    tasks = _tasks(env, array)
    assert [t.array_task_id for t in tasks] == [0, 1] and all(t.held for t in tasks)
    env.cycle()  # both are placed, each on its own GPU, and Slurm runs them
    env.cycle()
    assert (
        env.job(array).reason
        == "array tasks 2-5%2 not started yet: at most 2 run at once (%2), 2 placed or running"
    )
    running = [j for j in _tasks(env, array) if j.state == "RUNNING"]
    assert len(running) == 2
    gpus = [(n, i) for j in running for n, idx in j.gpus.items() for i in idx]
    assert len(set(gpus)) == 2
    assert {env.job(j.job_id).state for j in running} == {"running"}
    env.cycle()  # the throttle: no third task while two run
    split = _tasks(env, array)
    assert sum(1 for j in split if j.state == "RUNNING") == 2
    assert all(env.job(j.job_id).state != "placed" for j in split if j.state == "PENDING")
    env.slurm.finish(running[0].job_id)
    for _ in range(3):
        env.cycle()
    assert sum(1 for j in _tasks(env, array) if j.state == "RUNNING") == 2


def test_a_throttled_task_says_why_it_waits(tmp_path):
    env = make_env(tmp_path)
    array = env.submit("alice", "cv", 1, extra=["--array=0-2%1"])
    env.cycle()
    env.cycle()
    env.cycle()
    assert [j.state for j in _tasks(env, array)] == ["RUNNING"]
    assert env.job(array).reason.endswith("at most 1 run at once (%1), 1 placed or running")
    # a task split off by hand (an admin's update) still waits for the throttle
    env.ctl.split_array_task(array, 1)
    env.cycle()
    (second,) = [j for j in _tasks(env, array) if j.array_task_id == 1]
    assert (
        env.job(second.job_id).reason
        == f"array {array} runs at most 1 tasks at once (%1); 1 placed or running"
    )


def test_an_unthrottled_array_is_split_a_few_tasks_ahead(tmp_path):
    env = make_env(tmp_path)
    array = env.submit("alice", "cv", 1, extra=[f"--array=0-{SPLIT_AHEAD + 9}"])
    env.cycle()
    assert len(_tasks(env, array)) == SPLIT_AHEAD
    env.cycle()
    # cv owns 12 GPUs: 12 tasks run, the other split-off ones wait for GPUs
    assert sum(1 for j in _tasks(env, array) if j.state == "RUNNING") == 12


def test_the_last_task_is_the_array_record_itself(tmp_path):
    env = make_env(tmp_path)
    array = env.submit("alice", "cv", 1, extra=["--array=3,7"])
    env.cycle()
    env.cycle()
    (rec,) = [j for j in env.ctl.list_jobs() if j.job_id == array]
    assert rec.array_task_id in (3, 7) and not rec.array_pending
    assert env.job(array).state in ("placed", "running")


def test_array_strings_as_slurm_writes_them():
    assert array_tasks("0-7:2,9%3") == ([0, 2, 4, 6, 9], 3)
    assert array_text([1, 2, 3, 5], 2) == "1-3,5%2"
    with pytest.raises(SlurmError):
        array_tasks("1-x")


def test_recorded_squeue_shows_the_array_record_and_a_split_task(slurm_fixture):
    jobs = {j.job_id: j for j in parse_squeue_json(slurm_fixture("squeue_array_split.json"))}
    meta, task = jobs[2333], jobs[2334]
    assert meta.array_pending_meta and meta.display_id == "2333_[1-5%2]" and meta.array_max_tasks == 2
    assert task.display_id == "2333_0" and task.held and task.admin_comment == meta.admin_comment
    assert (task.cpus_per_node, task.mem_per_node_mb, task.features) == (4, 2048, "v100")


def test_hq_shows_array_ids_as_squeue_does_and_expands_them_with_r(slurm_fixture):
    from hivebatch.cli.hq.rows import Filters, collect_rows, expand_arrays

    jobs = [
        j for j in parse_squeue_json(slurm_fixture("squeue_array_split.json")) if j.job_id in (2333, 2334)
    ]
    rows = collect_rows(jobs, [], Filters(all_states=True))
    assert sorted(r.display_id for r in rows) == ["2333_0", "2333_[1-5%2]"]
    assert sorted(r.display_id for r in expand_arrays(rows)) == [f"2333_{i}" for i in range(6)]


def test_an_arrays_tasks_start_in_index_order_as_under_slurm(tmp_path):
    # Slurm orders jobs alike by their array's job id, then the task index (sort_job_queue2); the
    # last task keeps the array's own job id, so ordering by job id would start it first
    env = make_env(tmp_path)
    blocker = env.submit("bob", "nlp", 16)
    env.cycle()
    array = env.submit("bob", "nlp", 8, extra=["--array=0-3"])
    for _ in range(3):
        env.cycle()
    assert [t.state for t in _tasks(env, array)] == ["PENDING"] * 4
    assert any(t.job_id == array for t in _tasks(env, array))
    env.slurm.finish(blocker)
    for _ in range(3):
        env.cycle()
    running = [t.array_task_id for t in _tasks(env, array) if t.state == "RUNNING"]
    assert running == [0, 1]


def test_waiting_tasks_are_predicted_to_start_after_the_reserved_head(tmp_path):
    # two of the four 8-GPU tasks fit in nlp's 16 GPUs when the blocker ends, the other two when
    # those end; the head's reservation takes the first GPUs, so it is counted first
    env = make_env(tmp_path)
    blocker = env.submit("bob", "nlp", 16, time_limit_s=600)
    env.cycle()
    array = env.submit("bob", "nlp", 8, time_limit_s=900, extra=["--array=0-3"])
    for _ in range(3):
        env.cycle()
    end = env.job(blocker).predicted_end
    starts = {t.array_task_id: env.job(t.job_id).predicted_start for t in _tasks(env, array)}
    ends = {t.array_task_id: env.job(t.job_id).predicted_end for t in _tasks(env, array)}
    assert starts[0] == starts[1] == end
    later = end + (ends[0] - starts[0])
    assert starts[2] == starts[3] == later
    assert all((ends[i] - starts[i]).total_seconds() == 900 for i in range(4))


def test_an_array_its_owner_holds_waits_whole_until_they_release_it(tmp_path):
    # plain Slurm keeps `sbatch --array --hold` held; the controller's split is a hold Slurm shows as an
    # admin's, and the split tasks were placed without the owner's release
    # (tests/fixtures/slurm/array_owner_hold.txt)
    env = make_env(tmp_path)
    array = env.submit("alice", "cv", 1, extra=["--array=0-2", "--hold"])
    env.cycle()
    env.cycle()
    assert _tasks(env, array) == []  # nothing split off
    assert env.job(array).reason.startswith("held by its owner: scontrol release")
    env.slurm.as_user("alice").release(array)
    for _ in range(3):
        env.cycle()
    assert [t.state for t in _tasks(env, array)] == ["RUNNING"] * 3


def test_a_split_task_its_owner_holds_waits_until_they_release_it(tmp_path):
    # the controller's split is a hold Slurm shows as an admin's; Slurm ignores the owner's hold of a job
    # held already, so the task was placed with the others (tests/fixtures/slurm/owner_hold_of_held.txt)
    env = make_env(tmp_path)
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 4)  # cv is full: the tasks wait, split off
    env.cycle()
    array = env.submit("alice", "cv", 1, extra=["--array=0-2"])
    env.cycle()
    first, held, _ = _tasks(env, array)
    assert held.reason == "JobHeldAdmin"
    env.slurm.as_user("alice").hold(held.job_id)
    env.cycle()
    assert ("hbctl", "user_hold", (held.job_id,)) in env.slurm.calls
    assert env.slurm.job(held.job_id).reason == "JobHeldUser"
    assert env.job(held.job_id).reason == (
        f"held by its owner: scontrol release {array}_1 lets hivebatch place it"
    )
    for j in env.ctl.list_jobs():  # cv's GPUs come free
        if j.array_job_id is None and j.state == "RUNNING":
            env.slurm.finish(j.job_id)
    for _ in range(3):
        env.cycle()
    assert env.slurm.job(first.job_id).state == "RUNNING"
    assert env.slurm.job(held.job_id).state == "PENDING" and not env.job(held.job_id).placement
    env.slurm.as_user("alice").release(held.job_id)  # theirs to release, as on plain Slurm
    for _ in range(3):
        env.cycle()
    assert env.slurm.job(held.job_id).state == "RUNNING"


def test_a_placed_task_of_a_singleton_array_drops_the_dependency(tmp_path):
    # Slurm judges an array's singleton once and starts its tasks together (singleton_array.txt); a task
    # split off before keeps "singleton", and released it waited for its own running siblings
    env = make_env(tmp_path)
    first = env.submit("alice", "cv", 1)
    env.cycle()
    array = env.submit("alice", "cv", 1, extra=["--array=0-2", "--dependency=singleton"])
    for _ in range(2):
        env.cycle()
    tasks = [j for j in env.ctl.list_jobs() if j.array_job_id == array]
    assert all(j.state == "PENDING" and j.dependency.startswith("singleton") for j in tasks), tasks
    env.slurm.finish(first)
    for _ in range(3):
        env.cycle()
    tasks = [j for j in env.ctl.list_jobs() if j.array_job_id == array]
    assert [j.state for j in tasks] == ["RUNNING"] * 3, [(j.job_id, j.state, j.reason) for j in tasks]
    cleared = {args[0] for _, method, args in env.slurm.calls if method == "clear_dependency"}
    assert cleared and cleared <= {j.job_id for j in tasks}


@pytest.mark.parametrize("spec", ["3", "1,1,1", "5%1"])
def test_an_array_of_one_task_is_placed_as_the_job_it_is(tmp_path, spec):
    # recorded on the lab (tests/fixtures/slurm/array_single_task.txt): Slurm keeps such a record as
    # 520_[3] until it starts and splits nothing off it; hivebatch waited for a split for ever
    env = make_env(tmp_path)
    array = env.submit("alice", "cv", 1, extra=[f"--array={spec}"])
    assert env.ctl.job(array).array_task_id is None and env.ctl.job(array).array_pending
    env.cycle()
    job = env.ctl.job(array)
    assert job.state == "RUNNING" and job.array_task_id == int(spec[0]) and len(job.gpus) == 1
    assert env.job(array).placement == {n: list(g) for n, g in job.gpus.items()}
