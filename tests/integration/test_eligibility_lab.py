"""Only jobs Slurm would start now are placed (issue: Slurm's job semantics), on the real lab: a GPU job
waiting for its dependency or its begin time holds no cells until Slurm would start it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from lab_controller import Ctl
from lab_users import run_as

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]


def _sbatch(ctl: Ctl, user: str, *opts: str) -> int:
    out = run_as(
        user, ["sbatch", "--parsable", "-o", "/dev/null", "--chdir", str(ctl.jobs_dir), *opts], timeout=60
    )
    assert out.returncode == 0, out.stderr
    jid = int(out.stdout.strip())
    ctl.mine.add(jid)
    return jid


def _waiting_an_hour(ctl: Ctl, name: str) -> int:
    """alice's 1-GPU job with --begin=now+1hour: it waits, and its owner may move its start time."""
    return _sbatch(
        ctl, "alice", "-J", f"{ctl.tag}-{name}", "--gres=gpu:1", "--begin=now+1hour", "--wrap", "true"
    )


def test_dependency_and_begin_hold_no_cells_until_slurm_would_start_them(ctl: Ctl) -> None:
    first = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-first", "--wrap", "sleep 8")
    after = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-after", "--gres=gpu:2", f"--dependency=afterok:{first}",
                    "--wrap", "true")  # fmt: skip
    later = _waiting_an_hour(ctl, "later")
    ctl.cycle()
    ctl.cycle()
    assert ctl.job(after).state == "queued" and not ctl.job(after).placement
    assert ctl.job(after).reason.startswith(f"waits for its dependency afterok:{first}")
    assert ctl.job(later).state == "queued" and ctl.job(later).reason.startswith("waits for its begin time")
    # once the first job has succeeded Slurm would start the dependent one: it is placed and runs
    ctl.lab.wait_for(first, {"COMPLETED"}, timeout_s=60)
    ctl.until(lambda: ctl.job(after).state in ("running", "done"), what=lambda: ctl.job(after).reason)
    assert ctl.job(later).state == "queued" and not ctl.job(later).placement


def test_a_job_that_asked_to_be_cancelled_is_when_its_dependency_fails(ctl: Ctl) -> None:
    # plain Slurm cancels such a job at once; a held one only in its purge pass, a minute later
    # (tests/fixtures/slurm/kill_invalid_dep.txt)
    first = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-fails", "--wrap", "sleep 3; exit 3")
    after = [f"--dependency=afterok:{first}", "--gres=gpu:1", "--wrap", "true"]
    doomed = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-doomed", "--kill-on-invalid-dep=yes", *after)
    kept = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-kept", *after)
    ctl.cycle()
    ctl.lab.wait_for(first, {"FAILED"}, timeout_s=60)
    ctl.until(lambda: ctl.job(doomed).state == "cancelled", timeout_s=30, what=lambda: ctl.job(doomed).reason)
    failed, cancelled = sorted(ctl.backend.history(job_ids=[first, doomed]), key=lambda a: a.job_id)
    assert cancelled.state.startswith("CANCELLED")
    assert failed.end_time is not None and cancelled.end_time is not None
    assert (cancelled.end_time - failed.end_time).total_seconds() < 20  # not Slurm's minute
    assert ctl.events(doomed, "dependency_never")
    assert ctl.job(kept).state == "queued" and "can never be met: cancel it" in ctl.job(kept).reason


@contextmanager
def _slurm_conf_line(ctl: Ctl, line: str) -> Iterator[None]:
    """``line`` added to the lab's slurm.conf for slurmctld (scontrol reconfigure), taken out again
    afterwards, whatever happened."""
    conf = ctl.lab.conf
    original = conf.read_text()
    conf.write_text(original + line + "\n")
    try:
        subprocess.run(["scontrol", "reconfigure"], check=True, timeout=60)
        yield
    finally:
        conf.write_text(original)
        subprocess.run(["scontrol", "reconfigure"], check=True, timeout=60)


def test_the_clusters_kill_invalid_depend_is_followed_for_jobs_that_asked_neither_way(ctl: Ctl) -> None:
    # with DependencyParameters=kill_invalid_depend plain Slurm cancels such a job at once; held for
    # hivebatch it was cancelled 37 s later, in Slurm's purge pass (kill_invalid_depend_site.txt)
    with _slurm_conf_line(ctl, "DependencyParameters=kill_invalid_depend"):
        first = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-fails", "--wrap", "sleep 3; exit 3")
        after = [f"--dependency=afterok:{first}", "--gres=gpu:1", "--wrap", "true"]
        doomed = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-doomed", *after)
        kept = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-kept", "--kill-on-invalid-dep=no", *after)
        ctl.cycle()
        ctl.lab.wait_for(first, {"FAILED"}, timeout_s=60)
        ctl.until(
            lambda: ctl.job(doomed).state == "cancelled", timeout_s=30, what=lambda: ctl.job(doomed).reason
        )
        failed, cancelled = sorted(ctl.backend.history(job_ids=[first, doomed]), key=lambda a: a.job_id)
        assert failed.end_time is not None and cancelled.end_time is not None
        assert (cancelled.end_time - failed.end_time).total_seconds() < 20  # not Slurm's purge pass
        [said] = ctl.events(doomed, "dependency_never")
        assert "DependencyParameters=kill_invalid_depend" in said
        assert ctl.job(kept).state == "queued" and "can never be met: cancel it" in ctl.job(kept).reason


def test_an_array_dependency_and_a_singleton_are_judged_without_waiting_for_slurms_re_test(ctl: Ctl) -> None:
    # Slurm re-tests these for a held job once a minute (tests/fixtures/slurm/dependency_held_retest.txt)
    array = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-arr", "--array=0-2", "--gres=gpu:1", "--wrap", "sleep 2")
    whole = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-whole", "--gres=gpu:1", f"--dependency=afterok:{array}",
                    "--wrap", "true")  # fmt: skip
    one = ("-J", f"{ctl.tag}-solo", "--gres=gpu:1", "--dependency=singleton", "--wrap", "sleep 4")
    solo = [_sbatch(ctl, "alice", *one) for _ in range(2)]
    ctl.cycle()
    assert ctl.job(whole).reason.startswith(f"waits for its dependency afterok:{array}_*")
    assert ctl.job(solo[1]).reason.startswith("waits for its dependency singleton")
    assert ctl.job(solo[0]).placement  # nothing of its name came before it

    def array_done() -> bool:
        tasks = [j for j in ctl.lab.backend().list_jobs() if j.array_job_id == array]
        return len(tasks) == 3 and all(t.state == "COMPLETED" for t in tasks)

    ctl.until(array_done, timeout_s=60, what="the array's three tasks to complete")
    ctl.cycle()
    assert ctl.job(whole).placement, ctl.job(whole).reason  # Slurm's own text may still say unfulfilled
    first = ctl.lab.wait_for(solo[0], {"COMPLETED"}, timeout_s=60)
    ctl.cycle()
    assert ctl.job(solo[1]).placement, ctl.job(solo[1]).reason
    second = ctl.lab.wait_for(solo[1], {"COMPLETED"}, timeout_s=60)
    assert first.end_time is not None and second.start_time is not None
    assert second.start_time >= first.end_time  # one at a time, as under Slurm


def test_a_begin_time_outlasts_its_owners_release(ctl: Ctl) -> None:
    # a release replaces Slurm's begin time while the job waits; plain Slurm kept such a job pending for
    # its BeginTime, hivebatch placed it at once (tests/fixtures/slurm/begin_after_release.txt)
    held = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-heldbegin", "--gres=gpu:1", "--begin=now+1hour", "--hold",
                   "--wrap", "true")  # fmt: skip
    later = _waiting_an_hour(ctl, "holdbegin")
    assert run_as("alice", ["scontrol", "hold", str(later)]).returncode == 0
    ctl.cycle()
    for jid in (held, later):
        assert run_as("alice", ["scontrol", "release", str(jid)]).returncode == 0
    for _ in range(3):
        ctl.cycle()
    for jid in (held, later):
        assert ctl.job(jid).state == "queued" and not ctl.job(jid).placement
        assert ctl.job(jid).reason.startswith("waits for its begin time"), ctl.job(jid).reason
        assert ctl.lab.backend().list_jobs([jid])[0].state == "PENDING"


def test_the_owners_hold_of_a_job_an_admin_holds_leaves_the_admins_hold(ctl: Ctl) -> None:
    # plain Slurm ignores it; it replaced the plugin's admin-hold mark and the controller placed the job
    # once its dependency was met (tests/fixtures/slurm/owner_hold_of_held.txt)
    first = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-first", "--wrap", "sleep 2")
    after = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-admheld", "--gres=gpu:1", f"--dependency=afterany:{first}",
                    "--wrap", "true")  # fmt: skip
    assert run_as("root", ["scontrol", "hold", str(after)]).returncode == 0
    assert run_as("alice", ["scontrol", "hold", str(after)]).returncode == 0
    ctl.lab.wait_for(first, {"COMPLETED"}, timeout_s=60)
    for _ in range(3):
        ctl.cycle()
    assert ctl.job(after).state == "queued" and not ctl.job(after).placement
    assert ctl.job(after).reason.startswith("held by an admin"), ctl.job(after).reason
    assert run_as("alice", ["scontrol", "release", str(after)]).returncode != 0  # as on plain Slurm
    assert run_as("root", ["scontrol", "release", str(after)]).returncode == 0
    ctl.until(lambda: ctl.job(after).state in ("running", "done"), what=lambda: ctl.job(after).reason)


def test_the_owner_moves_the_start_time_of_a_waiting_job(ctl: Ctl) -> None:
    # plain Slurm lets them; every such update was refused (tests/fixtures/slurm/owner_start_time.txt)
    sooner = _waiting_an_hour(ctl, "sooner")
    later = _waiting_an_hour(ctl, "later")
    held = _waiting_an_hour(ctl, "held")
    ctl.cycle()
    assert run_as("alice", ["scontrol", "update", f"JobId={sooner}", "StartTime=now"]).returncode == 0
    assert run_as("alice", ["scontrol", "update", f"JobId={later}", "StartTime=now+2hours"]).returncode == 0
    # over their own hold, even before the controller's next cycle, the hold's mark stays (once it was
    # replaced, and the job ran; then the update was refused) and the controller keeps the time
    assert run_as("alice", ["scontrol", "hold", str(held)]).returncode == 0
    assert run_as("alice", ["scontrol", "update", f"JobId={held}", "StartTime=now"]).returncode == 0
    ctl.cycle()
    ctl.until(lambda: ctl.job(sooner).state in ("running", "done"), what=lambda: ctl.job(sooner).reason)
    assert ctl.job(later).reason.startswith("waits for its begin time"), ctl.job(later).reason
    (listed,) = ctl.lab.backend().list_jobs([later])
    assert (
        listed.eligible_time is not None
        and (listed.eligible_time - listed.submit_time).total_seconds() > 7000
    )
    assert ctl.job(held).reason.startswith("held by its owner"), ctl.job(held).reason
    assert ctl.job(held).state == "queued" and not ctl.job(held).placement
    # released, it starts at the time they set over the hold, not at its --begin an hour away
    assert run_as("alice", ["scontrol", "release", str(held)]).returncode == 0
    ctl.until(lambda: ctl.job(held).state in ("running", "done"), what=lambda: ctl.job(held).reason)


def test_a_start_time_set_just_before_a_hold_and_release_is_kept(ctl: Ctl) -> None:
    # all three between two controller cycles: the release replaced Slurm's begin time before the
    # controller had seen the new one, which was lost (tests/fixtures/slurm/owner_start_time.txt, job 243)
    jid = _waiting_an_hour(ctl, "quick")
    ctl.cycle()
    for change in (
        ["update", f"JobId={jid}", "StartTime=now+3hours"],
        ["hold", str(jid)],
        ["release", str(jid)],
    ):
        assert run_as("alice", ["scontrol", *change]).returncode == 0, change
    ctl.cycle()
    ctl.cycle()
    assert ctl.job(jid).reason.startswith("waits for its begin time"), ctl.job(jid).reason
    (listed,) = ctl.lab.backend().list_jobs([jid])
    assert listed.eligible_time is not None and listed.submit_time is not None
    assert (listed.eligible_time - listed.submit_time).total_seconds() > 3 * 3600 - 120, listed.eligible_time


def test_a_start_time_the_owner_moved_outlasts_their_hold_and_release(ctl: Ctl) -> None:
    # plain Slurm keeps a pending job's begin time through its owner's hold and release; the controller
    # gave back the --begin recorded at submit (tests/fixtures/slurm/owner_start_time.txt)
    fillers = [
        _sbatch(ctl, "alice", "-J", f"{ctl.tag}-fill", f"--gres=gpu:{n}", "--wrap", "sleep 300")
        for n in (8, 4)
    ]
    ctl.cycle()
    for jid in fillers:
        ctl.lab.wait_for(jid, {"RUNNING"})
    later = _waiting_an_hour(ctl, "later")
    sooner = _waiting_an_hour(ctl, "sooner")
    ctl.cycle()
    assert run_as("alice", ["scontrol", "update", f"JobId={later}", "StartTime=now+3hours"]).returncode == 0
    assert run_as("alice", ["scontrol", "update", f"JobId={sooner}", "StartTime=now"]).returncode == 0
    ctl.cycle()  # sooner waits for cv's GPUs now, later for its new start time
    for jid in (later, sooner):
        assert run_as("alice", ["scontrol", "hold", str(jid)]).returncode == 0
    ctl.cycle()
    for jid in (later, sooner):
        assert run_as("alice", ["scontrol", "release", str(jid)]).returncode == 0
    ctl.cycle()
    ctl.cycle()
    assert ctl.job(later).reason.startswith("waits for its begin time"), ctl.job(later).reason
    (listed,) = ctl.lab.backend().list_jobs([later])
    assert listed.eligible_time is not None and listed.submit_time is not None
    assert (listed.eligible_time - listed.submit_time).total_seconds() > 3 * 3600 - 120, listed.eligible_time
    assert not ctl.job(sooner).reason.startswith("waits for its begin time"), ctl.job(sooner).reason
    for jid in fillers:
        assert run_as("alice", ["scancel", str(jid)]).returncode == 0
    ctl.until(lambda: ctl.job(sooner).state in ("running", "done"), what=lambda: ctl.job(sooner).reason)


def test_the_owner_changes_the_nodes_a_waiting_job_lists_or_excludes(ctl: Ctl) -> None:
    # plain Slurm lets them; the plugin refused it as tampering, and a cleared list went unseen
    # (tests/fixtures/slurm/owner_exclude_nodes.txt)
    listed = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-w", "-w", "node1", "--gres=gpu:1", "--begin=now+1hour",
                     "--wrap", "true")  # fmt: skip
    cleared = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-w", "-w", "node1", "--gres=gpu:1", "--begin=now+1hour",
                      "--wrap", "true")  # fmt: skip
    ctl.cycle()
    assert run_as("alice", ["scontrol", "update", f"JobId={listed}", "ReqNodeList=node3"]).returncode == 0
    assert run_as("alice", ["scontrol", "update", f"JobId={cleared}", "ReqNodeList="]).returncode == 0
    ctl.cycle()
    assert run_as("alice", ["scontrol", "update", f"JobId={listed}", "StartTime=now"]).returncode == 0
    ctl.until(lambda: ctl.job(listed).state in ("running", "done"), what=lambda: ctl.job(listed).reason)
    assert list(ctl.job(listed).placement or {}) == ["node3"], ctl.job(listed).placement
    assert "node1" not in ctl.job(cleared).reason, ctl.job(cleared).reason
    jid = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-exc", "--gres=gpu:1", "--begin=now+1hour", "--wrap", "true")
    ctl.cycle()
    assert run_as("alice", ["scontrol", "update", f"JobId={jid}", "ExcNodeList=node[1-4]"]).returncode == 0
    assert run_as("alice", ["scontrol", "update", f"JobId={jid}", "StartTime=now"]).returncode == 0
    ctl.until(
        lambda: ctl.job(jid).reason.startswith("can never run as asked"), what=lambda: ctl.job(jid).reason
    )
    assert f"scontrol update JobId={jid} ReqNodeList=... or ExcNodeList=" in ctl.job(jid).reason
    # the rejection is judged again each cycle: the owner lets three nodes back, not node1
    assert run_as("alice", ["scontrol", "update", f"JobId={jid}", "ExcNodeList=node1"]).returncode == 0
    ctl.until(lambda: ctl.job(jid).state in ("running", "done"), what=lambda: ctl.job(jid).reason)
    assert ctl.job(jid).placement and "node1" not in ctl.job(jid).placement, ctl.job(jid).placement


def test_the_reason_an_owners_update_was_refused_reaches_the_jobs_reason(ctl: Ctl) -> None:
    # slurmctld drops the plugin's message on an update: the owner saw only "Access/permission denied"
    # (tests/fixtures/slurm/refused_update_note.txt)
    jid = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-nn", "--gres=gpu:1", "--begin=now+1hour", "--wrap", "true")
    ctl.cycle()
    out = run_as("alice", ["scontrol", "update", f"JobId={jid}", "Gres=gpu:16"])
    assert out.returncode != 0 and "Access/permission denied" in out.stderr, out.stderr
    ctl.cycle()
    assert ctl.job(jid).reason.endswith(
        " UTC was refused: 16 GPUs per node asked, but a node has at most 8"
    ), ctl.job(jid).reason


def test_a_running_jobs_refused_update_is_its_reason_in_hq(ctl: Ctl) -> None:
    # a running job has no waiting reason: the refusal was only an event
    jid = _sbatch(ctl, "alice", "-J", f"{ctl.tag}-run", "--gres=gpu:1", "--wrap", "sleep 60")
    ctl.until(lambda: ctl.job(jid).state == "running", what=lambda: ctl.job(jid).reason)
    out = run_as("alice", ["scontrol", "update", f"JobId={jid}", "ReqNodeList=node2"])
    assert out.returncode != 0 and "Access/permission denied" in out.stderr, out.stderr
    ctl.cycle()
    assert (ctl.job(jid).reason or "").endswith(
        f" UTC was refused: the node list of hivebatch job {jid} is set by hivebatch: cancel and resubmit to change it"
    ), ctl.job(jid).reason


def test_the_owner_changes_the_gpus_and_node_count_of_a_waiting_job(ctl: Ctl) -> None:
    # plain Slurm lets them, and runs the job with the new ask; the plugin refused both
    # (tests/fixtures/slurm/owner_gpu_update.txt)
    # opportunistic: these tests give nlp one node's cells, and a job on two nodes needs two of them
    jid = _sbatch(ctl, "bob", "-J", f"{ctl.tag}-ask", "-q", "opportunistic", "--gres=gpu:1", "--begin=now+1hour",
                  "--wrap", "true")  # fmt: skip
    ctl.cycle()
    for change in ("NumNodes=2", "Gres=gpu:2"):
        out = run_as("bob", ["scontrol", "update", f"JobId={jid}", change])
        assert out.returncode == 0, out.stderr
    ctl.cycle()
    assert (ctl.job(jid).gpus, ctl.job(jid).request["nodes"]) == (4, 2)
    assert run_as("bob", ["scontrol", "update", f"JobId={jid}", "StartTime=now"]).returncode == 0
    ctl.until(lambda: ctl.job(jid).state in ("running", "done"), what=lambda: ctl.job(jid).reason)
    placement = ctl.job(jid).placement or {}
    assert sorted(len(g) for g in placement.values()) == [2, 2], placement


def test_the_owner_changes_the_gpus_of_an_array_with_a_task_running(ctl: Ctl) -> None:
    # plain Slurm runs the tasks not started yet with the new ask, the running one keeps its GPUs, and
    # scontrol says nothing (tests/fixtures/slurm/owner_gpu_update.txt)
    array = _sbatch(
        ctl, "alice", "-J", f"{ctl.tag}-arr", "--array=0-2%1", "--gres=gpu:1", "--wrap", "sleep 8"
    )

    def tasks() -> dict[int, Any]:
        return {j.array_task_id: j for j in ctl.lab.backend().list_jobs() if j.array_job_id == array}

    ctl.until(lambda: 0 in tasks() and tasks()[0].state == "RUNNING", what=lambda: ctl.job(array).reason)
    out = run_as("alice", ["scontrol", "update", f"JobId={array}", "Gres=gpu:2"])
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert sum(len(g) for g in tasks()[0].gpus.values()) == 1
    ctl.until(lambda: 1 in tasks() and tasks()[1].state == "RUNNING", timeout_s=60)
    assert sum(len(g) for g in tasks()[1].gpus.values()) == 2
