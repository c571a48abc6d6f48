"""The fake backend answers like the lab: the same scenario as tests/integration/test_slurm_backend.py."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from hivebatch.slurm.types import SlurmError
from hivebatch.testing.fake_slurm import FakeSlurm

SCRIPT = "#!/bin/bash\nsleep 300\n"


def test_held_job_pinned_released_requeued_cancelled(fake_slurm):
    alice, op = fake_slurm.as_user("alice"), fake_slurm.as_user("hbctl")
    jid = alice.submit(SCRIPT, ["--hold", "-J", "pin35", "--comment", "hivebatch:v1:{}"])
    j = fake_slurm.job(jid)
    assert (j.state, j.reason, j.held, j.account, j.qos, j.user) == (
        "PENDING",
        "JobHeldUser",
        True,
        "cv",
        "normal",
        "alice",
    )
    op.update_pending(jid, nodelist=["node2"], num_nodes=1, gres="gpu:g3:1,gpu:g5:1")
    assert fake_slurm.job(jid).state == "PENDING"
    op.release(jid)
    j = fake_slurm.job(jid)
    assert j.state == "RUNNING" and j.nodes == ["node2"] and j.gpus == {"node2": [3, 5]}
    node2 = next(n for n in fake_slurm.list_nodes() if n.name == "node2")
    assert node2.gpus_used == [3, 5] and node2.state == "MIXED"

    op.requeue_hold(jid)
    j = fake_slurm.job(jid)
    assert (j.state, j.reason, j.held) == ("PENDING", "job_requeued_in_held_state", True)
    assert j.required_nodes == ["node2"] and j.tres_per_node == "gres:gpu:g3:1,gres:gpu:g5:1" and j.gpus == {}
    op.cancel(jid)
    j = fake_slurm.job(jid)
    assert j.state == "CANCELLED" and j.finished and j.exit_code == "0:15"
    assert [c[1] for c in fake_slurm.calls] == [
        "submit",
        "update_pending",
        "release",
        "requeue_hold",
        "cancel",
    ]


def test_a_requeue_keeps_the_run_in_accounting_and_resubmits_as_slurm_does(fake_slurm):
    # the shape of tests/fixtures/slurm/sacct_requeued_runs.txt, recorded on the lab
    jid = fake_slurm.as_user("alice").submit("#!/bin/sh\nsleep 4\n", ["-A", "cv", "-J", "twice"])
    submitted = fake_slurm.job(jid).submit_time
    fake_slurm.advance(3)
    op = fake_slurm.as_user("hbctl")
    op.requeue_hold(jid)
    assert fake_slurm.job(jid).submit_time == fake_slurm.now() > submitted
    op.release(jid)
    fake_slurm.advance(15)
    fake_slurm.finish(jid)
    first, then = fake_slurm.history([jid], runs=True)
    assert (first.state, then.state) == ("REQUEUED", "COMPLETED")
    assert first.submit_time == submitted and then.submit_time == first.end_time
    assert first.elapsed_s >= 3 and first.nodes
    assert fake_slurm.history([jid]) == [then]  # without --duplicates: the latest run only


def test_permissions_like_slurm_with_accounting(fake_slurm):
    alice, bob, op = (fake_slurm.as_user(u) for u in ("alice", "bob", "hbctl"))
    jid = alice.submit(SCRIPT, ["--hold"])
    for action in (
        lambda: bob.release(jid),
        lambda: bob.hold(jid),
        lambda: bob.update_pending(jid, ["node1"], 1),
    ):
        with pytest.raises(SlurmError) as err:
            action()
        assert err.value.permission_denied
    with pytest.raises(SlurmError) as err:
        bob.cancel(jid)
    assert err.value.permission_denied and err.value.returncode == 210
    op.hold(jid)
    assert fake_slurm.job(jid).reason == "JobHeldAdmin"
    with pytest.raises(SlurmError) as err:
        alice.release(jid)
    assert err.value.permission_denied
    op.release(jid)
    assert fake_slurm.job(jid).state == "RUNNING"


def test_submit_checks_account_and_qos(fake_slurm):
    alice = fake_slurm.as_user("alice")
    with pytest.raises(SlurmError, match="Invalid account"):
        alice.submit(SCRIPT, ["-A", "nlp"])
    with pytest.raises(SlurmError, match="Invalid qos"):
        alice.submit(SCRIPT, ["--qos=bogus"])
    with pytest.raises(SlurmError, match="unrecognized option"):
        alice.submit(SCRIPT, ["--frobnicate"])


def test_sbatch_lines_in_the_script_are_read(fake_slurm):
    jid = fake_slurm.as_user("bob").submit(
        "#!/bin/bash\n#SBATCH -J fromscript\n#SBATCH --qos=prior -t 1:30:00\nsleep 1\n#SBATCH -J ignored\n",
        ["--hold"],
    )
    j = fake_slurm.job(jid)
    assert (j.name, j.qos, j.time_limit_s, j.account) == ("fromscript", "prior", 5400, "nlp")


def _retyped_on_the_lab(text: str) -> list[tuple[list[str], bool, str, list[int]]]:
    """Per recorded job: the Gres= of each update, whether it ran and was requeued in between, what
    TresPerNode then showed, the GPU indices it ran on."""
    out = []
    for block in text.split("# job ")[1:]:
        updates = re.findall(r"^\$ scontrol update JobId=\d+ .*?Gres=(\S*)", block, re.M)
        shown = re.findall(r"TresPerNode=(\S+)", block)[-1]
        granted = sorted(int(i) for i in re.findall(r"\(IDX:(\d+)\)", block))
        out.append((updates, "requeuehold" in block, shown, granted))
    return out


@pytest.mark.parametrize("case", range(5))
def test_retyping_grants_the_old_gpus_too_as_recorded(fake_slurm, slurm_fixture, case):
    updates, requeued, shown, granted = _retyped_on_the_lab(slurm_fixture("scontrol_retyped_gres.txt"))[case]
    op = fake_slurm.as_user("hbctl")
    jid = fake_slurm.as_user("alice").submit(SCRIPT, ["--hold"])
    op.update_pending(jid, ["node2"], 1, updates[0])
    if requeued:
        op.release(jid)
        op.requeue_hold(jid)
    for gres in updates[1:]:  # a clearing update (Gres= or Gres=gpu:0) in between changes nothing
        op.update_pending(jid, gres=gres)
    assert fake_slurm.job(jid).tres_per_node == shown
    op.release(jid)
    fake_slurm.advance(15)
    assert fake_slurm.job(jid).gpus == {"node2": granted}


def test_lab_quirks_bad_constraints_and_mixed_typing(fake_slurm):
    op = fake_slurm.as_user("hbctl")
    j2 = fake_slurm.as_user("alice").submit(SCRIPT, ["--hold"])
    op.update_pending(j2, ["node1", "node2"], 1)
    op.release(j2)
    assert fake_slurm.job(j2).reason == "BadConstraints" and fake_slurm.job(j2).state == "PENDING"

    j3 = fake_slurm.as_user("alice").submit(SCRIPT, ["--hold", "--gres=gpu:2"])
    with pytest.raises(SlurmError, match="with and without type"):
        op.update_pending(j3, gres="gpu:g1:1")


def test_refusals_match_the_recorded_ones(fake_slurm, slurm_fixture):
    op = fake_slurm.as_user("hbctl")
    pending = fake_slurm.as_user("alice").submit(SCRIPT, ["--hold"])
    with pytest.raises(SlurmError) as err:
        op.requeue_hold(pending)
    assert err.value.stderr.strip() in slurm_fixture("err_requeuehold_pending.txt").replace(
        str(2), str(pending)
    )
    with pytest.raises(SlurmError) as err:
        op.release(999)
    assert err.value.unknown_job
    op.cancel(999)  # scancel is silent about unknown jobs, as recorded
    assert slurm_fixture("err_cancel_unknown.txt").strip() == "rc=0"


def test_gpus_busy_keep_jobs_pending_and_finish_frees_them(fake_slurm):
    op = fake_slurm.as_user("hbctl")
    a = fake_slurm.as_user("alice").submit(SCRIPT, ["--gres=gpu:g3:1", "-w", "node2"])
    b = fake_slurm.as_user("bob").submit(SCRIPT, ["--hold"])
    op.update_pending(b, ["node2"], 1, "gpu:g3:1")
    op.release(b)
    assert fake_slurm.job(a).state == "RUNNING"
    assert fake_slurm.job(b).state == "PENDING" and fake_slurm.job(b).reason == "Resources"
    fake_slurm.advance(30)
    fake_slurm.finish(a)
    assert fake_slurm.job(a).state == "COMPLETED" and fake_slurm.job(a).exit_code == "0:0"
    assert fake_slurm.job(b).state == "RUNNING"
    (rec,) = fake_slurm.history([a])
    assert rec.elapsed_s == 30 and rec.gpus == {"node2": [3]} and rec.state == "COMPLETED"
    fake_slurm.fail(b, exit_code=4)
    assert fake_slurm.job(b).exit_code == "4:0" and fake_slurm.job(b).reason == "NonZeroExitCode"


def test_shards_share_a_gpu_but_exclude_whole_gpu_use():
    fake = FakeSlurm(auto_schedule=False)
    s1 = fake.submit(SCRIPT, ["--gres=shard:g3:16", "-w", "node2"])
    s2 = fake.submit(SCRIPT, ["--gres=shard:g3:16", "-w", "node2"])
    whole = fake.submit(SCRIPT, ["--gres=gpu:g3:1", "-w", "node2"])
    assert fake.job(s1).state == "PENDING"  # no scheduling pass yet
    assert fake.schedule() == [s1, s2]
    assert fake.job(s1).shards == {"node2": {3: 16}} and fake.job(whole).reason == "Resources"
    node2 = next(n for n in fake.list_nodes() if n.name == "node2")
    assert node2.gpus_shared == [3] and node2.gpus_used == []


def test_bad_nodes_get_no_new_work(fake_slurm):
    fake_slurm.set_node_state("node1", "DRAIN", "fan")
    jid = fake_slurm.submit(SCRIPT, ["--gres=gpu:g0:1", "-w", "node1"])
    assert fake_slurm.job(jid).reason == "Resources"
    n1 = next(n for n in fake_slurm.list_nodes() if n.name == "node1")
    assert n1.bad and n1.state == "IDLE+DRAIN" and n1.reason == "fan"
    fake_slurm.set_node_state("node1", "IDLE")
    assert fake_slurm.job(jid).state == "RUNNING"
    with pytest.raises(ValueError):
        fake_slurm.set_node_state("node1", "BROKEN")


def test_multi_node_untyped_request_placed_symmetric_enough():
    fake = FakeSlurm()
    jid = fake.submit(SCRIPT, ["-N", "2", "--gres=gpu:4"])
    j = fake.job(jid)
    assert j.state == "RUNNING" and len(j.nodes) == 2 and all(len(v) == 4 for v in j.gpus.values())


def test_opportunistic_jobs_are_requeued_by_other_qos(fake_slurm):
    opp = fake_slurm.as_user("bob").submit(SCRIPT, ["--qos=opportunistic", "-w", "node4", "--gres=gpu:g1:1"])
    assert fake_slurm.job(opp).state == "RUNNING"
    urgent = fake_slurm.as_user("alice").submit(SCRIPT, ["--qos=urgent", "-w", "node4", "--gres=gpu:g1:1"])
    assert fake_slurm.job(urgent).state == "RUNNING"
    j = fake_slurm.job(opp)
    assert (j.state, j.reason, j.held, j.gpus) == ("PENDING", "BeginTime", False, {})
    # another opportunistic job does not preempt
    opp2 = fake_slurm.as_user("bob").submit(SCRIPT, ["--qos=opportunistic", "-w", "node4", "--gres=gpu:g1:1"])
    assert fake_slurm.job(opp2).reason == "Resources" and fake_slurm.job(urgent).state == "RUNNING"
    fake_slurm.cancel(opp2)
    fake_slurm.finish(urgent)
    # eligible again 11 s after its requeue, as on the lab (cred_expire=10, test_slurm_cli.py)
    fake_slurm.advance(10)
    assert fake_slurm.job(opp).state == "PENDING"
    fake_slurm.advance(1)
    assert fake_slurm.job(opp).state == "RUNNING"


def test_an_opportunistic_job_runs_out_its_qos_grace_before_it_is_requeued(fake_slurm):
    # as the lab test of Slurm's own preemption with GraceTime=5 (test_slurm_backend.py; preempt_grace.txt)
    fake_slurm.set_qos_grace("opportunistic", 5)
    assert fake_slurm.qos_grace_s("opportunistic") == 5 and fake_slurm.qos_grace_s("nope") is None
    opp = fake_slurm.as_user("bob").submit(SCRIPT, ["--qos=opportunistic", "-w", "node4", "--gres=gpu:g2:1"])
    urgent = fake_slurm.as_user("alice").submit(SCRIPT, ["--qos=urgent", "-w", "node4", "--gres=gpu:g2:1"])
    assert fake_slurm.job(urgent).reason == "Resources"
    told = fake_slurm.job(opp)
    assert told.state == "RUNNING" and told.grace_end == told.preempt_time + dt.timedelta(seconds=5)  # type: ignore[operator]
    fake_slurm.advance(4)
    assert fake_slurm.job(opp).state == "RUNNING" and fake_slurm.job(urgent).state == "PENDING"
    fake_slurm.advance(1)
    assert fake_slurm.job(urgent).state == "RUNNING" and fake_slurm.job(urgent).gpus == {"node4": [2]}
    j = fake_slurm.job(opp)
    assert (j.state, j.reason, j.preempt_time, j.grace_end) == ("PENDING", "BeginTime", None, None)


def test_finished_jobs_leave_squeue_after_min_job_age(fake_slurm):
    jid = fake_slurm.submit(SCRIPT, [])
    fake_slurm.finish(jid)
    fake_slurm.advance(299)
    assert [j.job_id for j in fake_slurm.list_jobs()] == [jid]
    fake_slurm.advance(2)
    assert fake_slurm.list_jobs() == [] and fake_slurm.history([jid])[0].state == "COMPLETED"
