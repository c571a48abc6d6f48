"""The controller cycle against the fake Slurm: placement, release, rejection, foreign work, bad nodes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from controller_support import CONFIG, Env, make_env
from sqlalchemy import select

from hivebatch.db import GpuBinding, GpuUsage, Job
from hivebatch.qos import Platform, Task
from hivebatch.qos.policies import Plan
from hivebatch.request import CONTROLLER_HOLD_AT
from hivebatch.slurm.types import SlurmError

SCRIPT_FOREIGN = "#!/bin/sh\nsleep 100\n"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    return make_env(tmp_path)


def _typed(gres: str) -> list[int]:
    return sorted(int(g.split(":")[1][1:]) for g in gres.split(","))


def test_held_job_is_pinned_to_the_cells_choice_and_released(env: Env) -> None:
    jid = env.submit("alice", "cv", 2, qos="prior")
    report = env.cycle()
    assert report.placed == 1 and report.ok
    job = env.job(jid)
    assert job.state == "placed" and job.intent is None
    ((node, idx),) = job.placement.items()
    assert len(idx) == 2 and _typed(job.gres) == idx
    sj = env.slurm.job(jid)
    assert sj.state == "RUNNING" and sj.gpus == {node: idx}  # Slurm runs it exactly where the cells chose
    updates = [c for c in env.slurm.calls if c[1] == "update_pending"]
    assert updates == [("hbctl", "update_pending", (jid, [node], 1, job.gres))]
    env.cycle()
    assert env.job(jid).state == "running"
    assert [e.kind for e in env.events(jid)] == ["submitted", "placed", "started"]


def test_rerunning_a_cycle_changes_nothing(env: Env) -> None:
    jid = env.submit("bob", "nlp", 4)
    env.cycle()
    env.cycle()
    calls, events = len(env.slurm.calls), len(env.events())
    env.cycle()
    assert len(env.slurm.calls) == calls and len(env.events()) == events
    assert env.job(jid).state == "running"


def test_finished_job_releases_its_cells_and_books_gpu_hours(env: Env) -> None:
    first = env.submit("alice", "cv", 8)
    env.cycle()
    second = env.submit("alice", "cv", 8)
    env.cycle()
    assert env.job(second).state == "queued"
    # the VC's head: it waits with a reservation until the first job's time limit
    held = env.job(second)
    first_row = env.job(first)
    assert held.reason is not None and held.reason.startswith("reserved: starts by ")
    assert first_row.start_time is not None and held.predicted_start is not None
    assert held.predicted_start > first_row.start_time
    env.slurm.advance(3600)
    env.slurm.finish(first)
    env.cycle()
    done = env.job(first)
    assert done.state == "done" and done.gpu_hours_guaranteed == pytest.approx(8.0, rel=0.01)
    assert env.job(second).state in ("placed", "running")
    with env.factory() as s:
        usage = s.scalars(select(GpuUsage)).all()
        assert sum(u.guaranteed_s for u in usage) == pytest.approx(8 * 3600, rel=0.01)
        assert {u.vc_name for u in usage} == {"cv"}


def test_failed_and_cancelled_jobs_end_in_their_states(env: Env) -> None:
    a = env.submit("alice", "cv", 1)
    b = env.submit("bob", "nlp", 1)
    env.cycle()
    env.slurm.fail(a, exit_code=3)
    env.slurm.as_user("bob").cancel(b)
    env.cycle()
    assert env.job(a).state == "failed" and env.job(b).state == "cancelled"


def test_an_account_that_is_no_vc_is_refused_at_submit(env: Env) -> None:
    env.slurm.accounts["alice"] = ["cv", "physics"]
    with pytest.raises(SlurmError, match="'physics' is not a virtual cluster"):
        env.submit("alice", "physics", 1)


def test_a_forged_admin_comment_gets_a_reason_and_is_never_placed(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    # only root could write this (scontrol update AdminComment=...): a JSON true is no GPU count
    env.slurm.set_admin_comment(jid, 'hivebatch:v2:{"gpus":true,"qos":"normal","vc":"cv"}')
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "rejected" and "gpus must be a positive whole number, got True" in job.reason
    assert env.slurm.job(jid).held and not [c for c in env.slurm.calls if c[1] == "update_pending"]


def test_vc_and_class_are_the_jobs_slurm_account_and_qos(env: Env) -> None:
    jid = env.submit("alice", "cv", 1, qos="normal")
    env.slurm.set_qos(jid, "urgent")  # the owner may move a waiting job to another class they are granted
    env.cycle()
    job = env.job(jid)
    assert job.state == "placed" and (job.vc_name, job.qos) == ("cv", "urgent")


def test_more_gpus_than_the_vc_holds_is_refused_at_submit(env: Env) -> None:
    with pytest.raises(SlurmError, match="virtual cluster sys has 4"):
        env.submit("carol", "sys", 8)


def test_job_given_a_gres_hivebatch_did_not_grant_is_not_placed(env: Env) -> None:
    jid = env.submit("alice", "cv", 1)
    env.slurm.update_pending(jid, gres="gpu:g0:1")  # only an admin can; the plugin keeps owners off it
    env.cycle()
    job = env.job(jid)
    assert job.state == "rejected" and "asks Slurm for GPUs itself" in job.reason
    assert not [c for c in env.slurm.calls if c[1] == "update_pending" and c[0] != "root"]


def test_owner_releasing_their_own_hold_is_held_again(env: Env) -> None:
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 4)  # cv is full now
    env.cycle()
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    # Slurm would start it without GPUs if nothing stopped it
    env.slurm._s.auto_schedule = False
    env.slurm.as_user("alice").release(jid)
    env.cycle()
    assert env.slurm.job(jid).held
    assert env.events(jid, "held")


def test_a_job_its_owner_holds_after_submitting_it_waits_until_they_release_it(env: Env) -> None:
    # seen on the lab: `scontrol hold` by the owner looked like the plugin's own hold, and the
    # controller placed and released the job within two seconds
    jid = env.submit("alice", "cv", 1)
    env.slurm.as_user("alice").hold(jid)
    env.cycle()
    job = env.job(jid)
    assert job.state == "queued" and not job.placement and job.reason.startswith("held by its owner")
    assert env.slurm.job(jid).held
    env.slurm.as_user("alice").release(jid)
    env.cycle()
    env.cycle()
    assert env.job(jid).placement and env.slurm.job(jid).state == "RUNNING"


def test_the_owners_hold_is_guarded_once_against_their_start_time(env: Env) -> None:
    # the plugin marks the hold of a job of its own at once, but writes no site factor on an update of
    # an array's records (slurmctld carried it to the next record and refused it there:
    # tests/fixtures/slurm/owner_start_time.txt), so the controller marks those
    single = env.submit("alice", "cv", 1)
    env.slurm.as_user("alice").hold(single)
    assert env.slurm._s.jobs[single].site_factor == -3
    array = env.submit("alice", "cv", 1, extra=["--array=0-2"])
    env.slurm.as_user("alice").hold(array)
    assert env.slurm._s.jobs[array].site_factor == 0
    env.cycle()
    env.cycle()
    assert [c for c in env.slurm.calls if c[1] == "guard_owner_hold"] == [
        ("hbctl", "guard_owner_hold", (array,))
    ]
    for jid in (single, array):
        assert env.slurm._s.jobs[jid].site_factor == -3
        env.slurm.as_user("alice").release(jid)
    env.cycle()  # taken back: the controller's hold clears the mark
    for jid in (single, array):
        assert env.slurm._s.jobs[jid].site_factor == 0


def test_a_job_an_admin_holds_waits_until_an_admin_releases_it(env: Env) -> None:
    # seen on the lab: an admin's `scontrol hold` of a waiting GPU job looked like the controller's own
    # hold, and the controller released the job as soon as its VC had room
    jid = env.submit("alice", "cv", 1)
    env.slurm.as_user("root").admin_hold(jid)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "queued" and not job.placement
    assert job.reason == f"held by an admin: it waits until an admin releases it (scontrol release {jid})"
    assert env.slurm.job(jid).held
    # a placed job an admin holds before Slurm starts it gives its cells back and waits the same way
    env.slurm.as_user("root").release(jid)
    assert env.slurm.job(jid).state == "PENDING"  # the plugin's far begin time: Slurm does not start it
    env.cycle()
    env.cycle()
    assert env.job(jid).placement and env.slurm.job(jid).state == "RUNNING"


def test_a_job_an_admin_releases_before_it_is_placed_does_not_start_without_its_gpus(env: Env) -> None:
    # seen on the lab: root's scontrol release of a held GPU job left it pending with no reason and no begin
    # time, for Slurm to start without the GPUs the plugin took off it
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 4)
    env.cycle()
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    assert env.job(jid).state == "queued"
    env.slurm.as_user("root").release(jid)
    assert env.slurm.job(jid).state == "PENDING"  # parked behind the plugin's far begin time
    env.cycle()
    assert env.slurm.job(jid).held and not env.job(jid).placement  # the controller's own hold again


def test_a_job_that_kept_its_gpus_is_not_started_by_an_admins_release_before_it_is_placed(env: Env) -> None:
    # a job requeued or taken back keeps the typed GPUs of its pin (Slurm never re-types a job): an admin's
    # release let Slurm start it on them, outside the cells, before the controller placed it again
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    env.cycle()
    env.slurm.requeue(jid)  # an admin's scontrol requeue, or a node failure
    env.cycle()
    held = env.slurm.job(jid)
    assert held.held and held.tres_per_node and held.eligible_time == dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    env.slurm.as_user("root").release(jid)
    env.slurm.advance(300)  # past Slurm's requeue delay
    assert env.slurm.job(jid).state == "PENDING"  # parked by its hold: Slurm does not start it
    env.cycle()
    again = env.slurm.job(jid)  # the controller's own hold again, parked as before
    assert again.held and again.eligible_time == dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    env.cycle()
    job = env.job(jid)
    assert (
        job.state == "placed"
        and env.slurm.job(jid).state == "RUNNING"
        and env.slurm.job(jid).eligible_time is None
    )


def test_a_waiting_job_its_owner_moves_to_another_vc_is_placed_and_booked_there(env: Env) -> None:
    # seen on the lab: alice, in cv and nlp, moved a waiting job from nlp to cv (scontrol update Account=cv);
    # Slurm books it to cv, but the ledger kept it in nlp
    env.slurm.accounts["alice"] = ["cv", "nlp"]
    for _ in range(2):
        env.submit("bob", "nlp", 8)  # nlp full
    env.cycle()
    jid = env.submit("alice", "nlp", 2)
    env.cycle()
    assert env.job(jid).state == "queued" and env.job(jid).vc_name == "nlp"
    env.slurm.as_user("alice").set_account(jid, "cv")
    env.cycle()
    job = env.job(jid)
    assert job.vc_name == "cv" and job.placement and env.slurm.job(jid).state == "RUNNING"
    with env.factory() as s:
        (cell,) = {b.vc_name for b in s.scalars(select(GpuBinding)) if b.slurm_job_id == jid}
    assert cell == "cv"
    (moved,) = env.events(jid, kind="moved")
    assert moved.message == "moved from VC nlp to VC cv: its Slurm account is cv now"
    with pytest.raises(SlurmError):  # its GPUs are cv's now
        env.slurm.as_user("alice").set_account(jid, "nlp")
    env.cycle()  # seen running
    env.slurm.advance(600)
    env.slurm.finish(jid)
    env.cycle()
    ((node, gpus),) = job.placement.items()
    with env.factory() as s:
        booked = {u.vc_name for u in s.scalars(select(GpuUsage)) if u.node == node and u.gpu_index in gpus}
    assert booked == {"cv"}  # its GPU time is cv's, as Slurm's accounting has it


def test_a_held_job_a_stale_plugin_left_a_far_begin_time_on_still_starts_when_placed(env: Env) -> None:
    # a plugin rendered before the controller's hold marker keeps the marker as the job's begin time
    # (Slurm does: tests/fixtures/slurm/admin_hold_marked.txt shows the begin time it is dropped from)
    jid = env.submit("alice", "cv", 1)
    held = env.slurm._s.jobs[jid]  # the fake's own record: the controller held it with a stale plugin
    held.eligible_at, held.reason = CONTROLLER_HOLD_AT, "JobHeldAdmin"
    env.cycle()
    env.cycle()
    assert env.job(jid).placement and env.slurm.job(jid).state == "RUNNING"


def test_a_running_job_its_owner_requeue_holds_waits_until_they_release_it(env: Env) -> None:
    # seen on the lab: plain Slurm kept such a job held; the controller placed it again within a
    # cycle, and it ran again (tests/fixtures/slurm/requeuehold_owner.txt)
    jid = env.submit("alice", "cv", 2)
    env.cycle()
    placed = env.job(jid).placement
    assert env.slurm.job(jid).state == "RUNNING"
    env.slurm.as_user("alice").requeue_hold(jid)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert env.slurm.job(jid).held and env.slurm.job(jid).state == "PENDING"
    assert job.reason is not None and job.reason.startswith("held by its owner: scontrol release"), job.reason
    # released: Slurm would start it on the GPU indices it kept; the plugin's owner-hold begin time stops it
    env.slurm.as_user("alice").release(jid)
    assert env.slurm.job(jid).state == "PENDING"
    env.cycle()
    env.cycle()
    assert env.slurm.job(jid).state == "RUNNING" and env.job(jid).placement == placed


def test_foreign_gpu_job_is_recorded_and_its_gpus_avoided(env: Env) -> None:
    fid = env.slurm.submit(SCRIPT_FOREIGN, ["-A", "nlp", "-w", "node1", "--gres=gpu:g0:1,gpu:g1:1"])
    assert env.slurm.job(fid).state == "RUNNING"
    ids = [env.submit("alice", "cv", 1) for _ in range(6)]
    env.cycle()
    foreign = env.job(fid)
    assert foreign.foreign and foreign.state == "running" and foreign.placement == {"node1": [0, 1]}
    for jid in ids:
        placement = env.job(jid).placement
        assert placement, (env.job(jid).state, env.job(jid).reason)
        assert not (set(placement.get("node1", [])) & {0, 1})
    with env.factory() as s:
        kinds = {(b.node, b.gpu_index): b.kind for b in s.scalars(select(GpuBinding))}
    assert kinds[("node1", 0)] == "foreign" and kinds[("node1", 1)] == "foreign"
    env.slurm.finish(fid)
    env.cycle()
    assert env.job(fid).state == "done"


def test_down_and_drained_nodes_get_no_new_work(env: Env) -> None:
    env.slurm.set_node_state("node2", "DOWN", "test")
    env.slurm.set_node_state("node3", "DRAIN", "test")
    jobs = [env.submit("bob", "nlp", 8), env.submit("alice", "cv", 8), env.submit("carol", "sys", 2)]
    env.cycle()
    used = set()
    for jid in jobs:
        placement = env.job(jid).placement or {}
        used |= set(placement)
    assert used and not used & {"node2", "node3"}
    assert {e.data["node"] for e in env.events(kind="node_bad")} == {"node2", "node3"}
    with env.factory() as s:
        assert s.get(GpuBinding, ("node2", 0)).bad
    env.slurm.set_node_state("node2", "IDLE")
    env.cycle()
    assert [e.data["node"] for e in env.events(kind="node_healthy")] == ["node2"]


def test_waiting_jobs_get_reason_and_predicted_start(env: Env) -> None:
    first = env.submit("alice", "cv", 8, time_limit_s=600)
    env.submit("alice", "cv", 4, time_limit_s=1200)
    env.cycle()
    second = env.submit("alice", "cv", 4, time_limit_s=600)
    env.cycle()
    first_job, waiting = env.job(first), env.job(second)
    assert waiting.state == "queued" and waiting.reason
    assert waiting.predicted_start is not None and first_job.start_time is not None
    # it can start once the first job's 10 minutes are over
    assert abs((waiting.predicted_start - first_job.start_time).total_seconds() - 600) < 120


def test_no_start_is_predicted_while_every_node_takes_no_new_work(env: Env) -> None:
    # seen on the lab: with every node drained for maintenance, hq said START "now" for each waiting job
    for node in ("node1", "node2", "node3", "node4"):
        env.slurm.set_node_state(node, "DRAIN", "maintenance")
    guaranteed, idle = env.submit("alice", "cv", 4), env.submit("bob", "nlp", 2, qos="opportunistic")
    env.cycle()
    for jid in (guaranteed, idle):
        job = env.job(jid)
        assert job.state == "queued" and job.reason and job.predicted_start is None, (
            job.reason,
            job.predicted_start,
        )
    env.slurm.set_node_state("node2", "RESUME")
    env.cycle()
    assert env.job(guaranteed).state in ("placed", "running")


def test_a_job_without_gpus_is_slurms_alone(env: Env) -> None:
    jid = env.slurm.as_user("alice").submit(SCRIPT_FOREIGN, ["-A", "cv"])
    assert env.slurm.job(jid).state == "RUNNING" and env.slurm.job(jid).admin_comment == ""
    env.cycle()
    with env.factory() as s:
        assert s.scalars(select(Job).where(Job.slurm_job_id == jid)).first() is None


def test_lost_ledger_adopts_running_hivebatch_jobs(env: Env, tmp_path: Path) -> None:
    jid = env.submit("bob", "nlp", 2)
    env.cycle()
    placement = env.job(jid).placement
    with env.factory() as s:
        s.query(Job).delete()
        s.commit()
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.placement == placement and not job.foreign
    other = env.submit("bob", "nlp", 8)
    env.cycle()
    assert not (
        set(env.job(other).placement.get(next(iter(placement)), [])) & set(next(iter(placement.values())))
    )


def test_gpus_busy_without_a_visible_job_are_occupied(env: Env) -> None:
    # a shard job on GPU 2 of node3 (not through hsub): Slurm keeps whole-GPU use of that GPU apart
    sid = env.slurm.submit(SCRIPT_FOREIGN, ["-A", "nlp", "-w", "node3", "--gres=shard:g2:4"])
    assert env.slurm.job(sid).state == "RUNNING"
    ids = [env.submit("bob", "nlp", 8), env.submit("alice", "cv", 8)]
    env.cycle()
    with env.factory() as s:
        assert s.get(GpuBinding, ("node3", 2)).kind == "foreign"
    for jid in ids:
        assert 2 not in (env.job(jid).placement or {}).get("node3", [])


def test_foreign_work_is_booked_as_foreign_gpu_time(env: Env) -> None:
    fid = env.slurm.submit(SCRIPT_FOREIGN, ["-A", "sys", "-w", "node4", "--gres=gpu:g7:1"])
    env.cycle()
    env.slurm.advance(1800)
    env.slurm.finish(fid)
    env.cycle()
    with env.factory() as s:
        rows = s.scalars(select(GpuUsage)).all()
    # one row per UTC day: a run that crosses midnight is booked on both days
    assert {(r.node, r.gpu_index, r.vc_name) for r in rows} == {("node4", 7, "")}
    assert sum(r.foreign_s for r in rows) == pytest.approx(1800, abs=5)
    assert sum(r.guaranteed_s + r.opportunistic_s for r in rows) == 0


def test_a_model_without_profile_is_planned_plain_and_its_owner_told(env: Env) -> None:
    jid = env.submit("alice", "cv", 1, model="nosuchnet", batch_size=32, iters=1000)
    env.cycle()
    job = env.job(jid)
    assert job.state == "placed"
    assert job.reason and "no profile for model nosuchnet" in job.reason
    assert job.reason.endswith("planned as a plain job")
    (placed,) = env.events(jid, kind="placed")
    assert placed.message.endswith("planned as a plain job")


def test_a_waiting_job_is_told_its_model_is_planned_plain(env: Env) -> None:
    env.submit("alice", "cv", 8)
    env.submit("alice", "cv", 4)
    env.cycle()
    jid = env.submit("alice", "cv", 4, model="nosuchnet", batch_size=32, iters=1000)
    env.cycle()
    job = env.job(jid)
    assert job.state == "queued"
    assert job.reason is not None and job.reason.startswith("reserved: starts by ")  # the VC's head
    assert job.reason.split("; idle GPUs")[0].endswith("planned as a plain job)")  # the hint comes last


def test_jobs_slurm_would_not_start_yet_hold_no_cells(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # the controller's clock follows the fake's, so the begin time can pass
    monkeypatch.setattr("hivebatch.controller.observe.utcnow", lambda: env.slurm.now().replace(tzinfo=None))
    first = env.slurm.as_user("alice").submit(SCRIPT_FOREIGN, ["-A", "cv"])  # no GPUs: Slurm runs it
    after = env.submit("alice", "cv", 8, extra=["--dependency", f"afterok:{first}"])
    later = env.submit("alice", "cv", 4, extra=["--begin", "now+2hours"])
    now = env.submit("alice", "cv", 8)
    env.cycle()
    assert env.job(now).state == "placed"  # the 8 GPUs the dependent job would have taken
    assert env.job(after).state == "queued" and env.job(after).reason.startswith(
        f"waits for its dependency afterok:{first}"
    )
    assert env.job(later).state == "queued" and env.job(later).reason.startswith("waits for its begin time")
    env.slurm.finish(first)
    env.slurm.finish(now)
    env.cycle()
    env.cycle()
    assert env.job(after).state in ("placed", "running")
    assert env.job(later).state == "queued"
    env.slurm.advance(2 * 3600 + 60)
    env.cycle()
    assert env.job(later).state in ("placed", "running")


def test_a_failed_dependency_is_said_and_holds_no_cells(env: Env) -> None:
    first = env.slurm.as_user("alice").submit(SCRIPT_FOREIGN, ["-A", "cv"])
    env.slurm.fail(first)
    jid = env.submit("alice", "cv", 1, extra=["--dependency", f"afterok:{first}"])
    env.cycle()
    job = env.job(jid)
    assert job.state == "queued" and "can never be met" in job.reason and not job.placement


def test_a_zero_gpu_item_beside_the_ask_is_no_gpu_the_job_asks_slurm_for(env: Env) -> None:
    # what cli_filter.lua leaves of srun's --gres=gpu:2 when it asks for the GPUs per step instead
    jid = env.submit("alice", "cv", 2, extra=["--gres=gpu:0"])
    assert "gpu:0" in env.slurm.job(jid).tres_per_node
    env.cycle()
    job = env.job(jid)
    assert job.state in ("placed", "running") and sum(len(g) for g in job.placement.values()) == 2


def test_a_job_past_its_deadline_is_ended_by_slurm_and_leaves_the_reservation(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the controller's clock follows the fake's, so the deadline can pass
    monkeypatch.setattr("hivebatch.controller.observe.utcnow", lambda: env.slurm.now().replace(tzinfo=None))
    env.submit("alice", "cv", 8, extra=["-t", "60"])  # cv's one node cell
    env.cycle()
    late = env.submit("alice", "cv", 8, extra=["-t", "10", "--deadline", "now+15minutes"])
    after = env.submit("alice", "cv", 8, extra=["-t", "10"])
    env.cycle()
    assert env.job(late).reason is not None and env.job(late).reason.startswith("reserved: starts by")
    env.slurm.advance(5 * 60 + 10)  # 10 min of limit from now ends after the deadline
    env.cycle()
    assert env.job(late).reason is not None and "can no longer be met" in env.job(late).reason
    assert env.slurm.job(late).state == "DEADLINE"  # released, and Slurm's scheduler ended it
    env.cycle()
    assert env.job(late).state == "failed"
    assert env.job(after).reason is not None and env.job(after).reason.startswith("reserved: starts by")


def test_the_policy_is_handed_each_vcs_free_gpus_as_in_the_simulator(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The qos policy's makespan guards and shape lists need them; GPUs lent to opportunistic jobs
    count as free, as the cells take them back."""
    env.submit("alice", "cv", 4)
    env.submit("carol", "sys", 8, qos="opportunistic")
    env.cycle()
    seen: list[dict[str, int] | None] = []
    plan = env.ctx.policy.plan

    def spy(
        tasks: list[Task], now: float, platform: Platform, limits: dict[str, int] | None = None
    ) -> list[Plan]:
        seen.append(None if limits is None else dict(limits))
        return plan(tasks, now, platform, limits)

    monkeypatch.setattr(env.ctx.policy, "plan", spy)
    env.submit("bob", "nlp", 2)
    env.cycle()
    # cv: 12 GPUs, 4 held; nlp: 16; sys: 4, as its opportunistic job does not count
    assert seen and seen[0] == {"cv": 8, "nlp": 16, "sys": 4}


def test_with_backfill_off_a_higher_class_still_takes_its_vcs_gpus_from_a_lower_one(tmp_path: Path) -> None:
    """The VC's free GPUs count the lower class's as taken; the higher class keeps its shapes."""
    config = CONFIG.replace("interval_s: 1}", "interval_s: 1, backfill: false}")
    env = make_env(tmp_path, config)
    low = env.submit("alice", "cv", 8, qos="normal")
    env.cycle()
    env.cycle()
    high = env.submit("alice", "cv", 8, qos="urgent")
    env.cycle()
    assert env.job(low).state == "preempted" and env.job(high).state == "placed"
    # a new job of the lower class finds 4 of cv's 12 GPUs free and says so
    other = env.submit("alice", "cv", 8, qos="normal")
    env.cycle()
    assert env.job(other).reason == "waiting for VC cv's GPUs: it needs 8 of the VC's 12, fewer are free now"


def test_a_prediction_is_rewritten_whole_when_any_part_of_it_moved():
    # a start within the tolerance beside an end that moved would show a run of another length
    from hivebatch.controller.cycle import PREDICTION_TOLERANCE_S, _set_prediction
    from hivebatch.controller.decide.types import Wait
    from hivebatch.db import Job

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    t0 = now + dt.timedelta(hours=10)  # far enough away for the widest tolerance
    job = Job(predicted_start=t0, predicted_end=t0 + dt.timedelta(minutes=10), slack_s=600.0)
    small = dt.timedelta(seconds=PREDICTION_TOLERANCE_S / 2)
    big = dt.timedelta(seconds=PREDICTION_TOLERANCE_S * 2)
    _set_prediction(
        job,
        Wait(
            job,
            "r",
            predicted_start=t0 + small,
            predicted_end=t0 + small + dt.timedelta(minutes=10),
            slack_s=600.0,
        ),
        now,
    )
    assert job.predicted_start == t0  # nothing moved noticeably: the row is left as it is
    start, end = t0 + small, t0 + small + big
    _set_prediction(
        job,
        Wait(job, "r", predicted_start=start, predicted_end=end, slack_s=600.0 - big.total_seconds()),
        now,
    )
    assert (job.predicted_start, job.predicted_end) == (start, end)


def test_a_near_start_that_moved_minutes_is_rewritten_and_a_far_one_is_not():
    # seen on the lab: a job first predicted to start at once (its VC had free GPUs, every node's CPUs
    # were taken) got a backfill reservation 168 s later on the next cycle; under a flat 5-minute
    # tolerance hq went on showing START "now" while the reason said "starts by 13:40:56"
    from hivebatch.controller.cycle import _set_prediction
    from hivebatch.controller.decide.types import Wait
    from hivebatch.db import Job

    first = dt.datetime(2026, 11, 28, 13, 38, 8, tzinfo=dt.UTC)
    now = first + dt.timedelta(seconds=14)
    reserved = dt.datetime(2026, 11, 28, 13, 40, 56, tzinfo=dt.UTC)
    run = dt.timedelta(minutes=3)
    job = Job(predicted_start=first, predicted_end=first + run, slack_s=120.0)
    _set_prediction(
        job, Wait(job, "r", predicted_start=reserved, predicted_end=reserved + run, slack_s=0.0), now
    )
    assert (job.predicted_start, job.predicted_end, job.slack_s) == (reserved, reserved + run, 0.0)

    far = now + dt.timedelta(hours=10)
    job = Job(predicted_start=far, predicted_end=far + run, slack_s=120.0)
    moved = far + dt.timedelta(minutes=3)
    _set_prediction(job, Wait(job, "r", predicted_start=moved, predicted_end=moved + run, slack_s=0.0), now)
    assert job.predicted_start == far  # three minutes on a start ten hours away: not worth a write

    # a job predicted to start "now" that still waits a cycle later is not rewritten every cycle
    job = Job(predicted_start=first, predicted_end=first + run, slack_s=120.0)
    later = first + dt.timedelta(seconds=60)
    _set_prediction(
        job, Wait(job, "r", predicted_start=later, predicted_end=later + run, slack_s=60.0), later
    )
    assert job.predicted_start == first


def test_a_running_job_whose_owner_lowers_its_limit_is_expected_to_end_by_it(env: Env) -> None:
    # seen on the lab: alice lowered her running 10-min job to 4 min (scontrol update TimeLimit=4),
    # Slurm ends it at start + 4 min (tests/fixtures/slurm/time_limit_owner_update.txt), and hq
    # still showed the 10-min end and +9m of slack
    jid = env.submit("alice", "cv", 1, time_limit_s=600)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "running" and job.predicted_end is not None and job.slack_s is not None
    before_end, before_slack = job.predicted_end, job.slack_s
    with pytest.raises(SlurmError, match="Access/permission denied"):
        env.slurm.as_user("alice").set_time_limit(jid, 1200)  # only an operator may raise it
    env.slurm.as_user("alice").set_time_limit(jid, 240)
    env.cycle()
    job = env.job(jid)
    assert job.predicted_end == job.segment_start + dt.timedelta(seconds=240) < before_end
    assert job.slack_s == pytest.approx(before_slack + (before_end - job.predicted_end).total_seconds())
    env.cycle()
    assert env.job(jid).predicted_end == job.predicted_end  # settled: nothing moves again


def test_the_owners_hold_of_a_job_an_admin_holds_leaves_the_admins_hold(env: Env) -> None:
    # plain Slurm ignores it (tests/fixtures/slurm/owner_hold_of_held.txt); it used to replace the plugin's
    # admin-hold mark, and the controller placed the job
    jid = env.submit("alice", "cv", 1)
    env.slurm.as_user("root").admin_hold(jid)
    env.slurm.as_user("alice").hold(jid)
    env.cycle()
    env.cycle()
    job = env.job(jid)
    assert job.state == "queued" and not job.placement and job.reason.startswith("held by an admin")
    assert not [c for c in env.slurm.calls if c[1] == "user_hold"]
    with pytest.raises(SlurmError):
        env.slurm.as_user("alice").release(jid)
    env.slurm.as_user("root").release(jid)
    env.cycle()
    env.cycle()
    assert env.job(jid).placement and env.slurm.job(jid).state == "RUNNING"


def test_a_start_time_its_owner_set_outlasts_their_hold_and_release(env: Env) -> None:
    # plain Slurm keeps a pending job's begin time through its owner's hold and release; the plugin's
    # marks replace it, and the controller gave back the --begin recorded at submit instead
    # (tests/fixtures/slurm/owner_start_time.txt)
    fillers = [env.submit("alice", "cv", 8), env.submit("alice", "cv", 4)]  # cv full: they wait for GPUs
    env.cycle()
    now = env.slurm.now()
    later = env.submit("alice", "cv", 1, extra=["--begin=now+1hour"])
    sooner = env.submit("alice", "cv", 1, extra=["--begin=now+2hours"])
    env.cycle()
    alice = env.slurm.as_user("alice")
    alice.set_start_time(later, now + dt.timedelta(hours=3))
    alice.set_start_time(sooner, None)
    env.cycle()
    assert [e.message for e in env.events(sooner, kind="start_time")] == [
        "its owner set its start time to now"
    ]
    assert [e.message for e in env.events(later, kind="start_time")] == [
        f"its owner set its start time to {now + dt.timedelta(hours=3):%Y-%m-%d %H:%M:%S} UTC"
    ]
    assert not env.job(sooner).reason.startswith("waits for its begin time"), env.job(sooner).reason
    for jid in (later, sooner):
        alice.hold(jid)
        with pytest.raises(SlurmError, match="Access/permission denied"):
            alice.set_start_time(jid, None)  # over their hold's mark, as the plugin refuses it
    env.cycle()
    for jid in (later, sooner):
        alice.release(jid)
    env.cycle()
    env.cycle()
    job = env.job(later)
    assert job.state == "queued" and not job.placement
    assert job.reason.startswith(f"waits for its begin time {now + dt.timedelta(hours=3):%Y-%m-%d %H:%M} UTC")
    assert env.slurm.job(later).eligible_time == (now + dt.timedelta(hours=3)).replace(tzinfo=dt.UTC)
    assert not env.job(sooner).reason.startswith("waits for its begin time"), env.job(sooner).reason
    for jid in fillers:
        env.slurm.finish(jid)
    env.cycle()
    assert env.job(sooner).placement and env.slurm.job(sooner).state == "RUNNING"
    assert len(env.events(later, kind="start_time")) == 1  # the controller's own begin time is no news


def test_the_collector_is_off_during_a_cycle_and_collects_after(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    seen: list[bool] = []
    ctl = env.ctl
    listing = ctl.list_jobs

    def list_jobs(*a: object, **kw: object) -> object:
        seen.append(gc.isenabled())
        return listing(*a, **kw)

    monkeypatch.setattr(ctl, "list_jobs", list_jobs)
    collected: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
    env.submit("alice", "cv", 2, qos="prior")
    report = env.cycle(ctl)
    assert seen and not any(seen) and gc.isenabled() and collected == [1]
    assert report.timings["collect"] >= 0 and report.seconds >= sum(report.timings.values()) - 1e-6


def test_a_collector_turned_off_by_the_caller_stays_off(env: Env) -> None:
    import gc

    gc.disable()
    try:
        env.cycle()
        assert not gc.isenabled()
    finally:
        gc.enable()
