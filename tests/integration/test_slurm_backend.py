"""The CLI backend against the real lab: the held-job pattern hivebatch is built on, and Slurm's permissions."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from lab_qos import opportunistic_grace

from hivebatch.slurm.types import SlurmError

pytestmark = pytest.mark.integration

PROBE = """#!/bin/bash
echo "host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES jobgpus=$SLURM_JOB_GPUS shards=${SLURM_SHARDS_ON_NODE:-}"
sleep 300
"""


def _submit(lab, user, name, extra=()):
    out = lab.jobs_dir / f"{name}-%j.out"
    args = ["--hold", "-J", name, "--chdir", str(lab.jobs_dir), "-o", str(out), "--open-mode=append", *extra]
    return lab.backend(user).submit(PROBE, args)


def test_held_job_pinned_to_gpus_3_and_5_on_node2(slurm_lab, lab_jobs):
    alice, op = slurm_lab.backend("alice"), slurm_lab.backend(slurm_lab.operator)
    jid = _submit(slurm_lab, "alice", "pin35", ["--comment", 'hivebatch:v1:{"vc":"cv"}'])
    lab_jobs.append(jid)
    job = slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    assert (job.user, job.account, job.qos, job.reason) == ("alice", "cv", "normal", "JobHeldUser")
    assert job.gpus == {} and job.tres_per_node == ""
    assert job.comment == 'hivebatch:v1:{"vc":"cv"}'

    op.update_pending(jid, nodelist=["node2"], num_nodes=1, gres="gpu:g3:1,gpu:g5:1")
    op.release(jid)
    job = slurm_lab.wait_for(jid, {"RUNNING"})
    assert job.nodes == ["node2"]
    assert job.gpus == {"node2": [3, 5]}
    out = slurm_lab.wait_for_file(slurm_lab.jobs_dir / f"pin35-{jid}.out", "cvd=")
    assert "host=node2 cvd=3,5 jobgpus=3,5" in out
    node2 = next(n for n in alice.list_nodes() if n.name == "node2")
    assert {3, 5} <= set(node2.gpus_used)

    # requeue-hold: back to PENDING, held, keeping its pinned GRES and node
    op.requeue_hold(jid)
    job = slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    assert job.reason == "job_requeued_in_held_state"
    assert job.required_nodes == ["node2"]
    assert "gpu:g3:1" in job.tres_per_node and "gpu:g5:1" in job.tres_per_node

    op.cancel(jid)
    job = slurm_lab.wait_for(jid, {"CANCELLED"})
    assert job.finished and not job.held


@pytest.mark.parametrize(
    "cleared, retype",
    [(None, "gpu:g1:1"), (None, "gpu:g1:1,gpu:g3:0"), ("", "gpu:g1:1"), ("gpu:0", "gpu:g1:1")],
)
def test_retyping_a_typed_gres_keeps_the_old_gpus(slurm_lab, lab_jobs, cleared, retype):
    """Why a requeued job only ever resumes on its own GPU indices: Slurm 22.05 takes a new typed gres
    and shows it, but still grants the old type as well, even when the update gives it a count of 0 or
    an update clears the gres first (Gres= or Gres=gpu:0). slurmctld merges an update into the job's
    requested gres list and never removes a type from it (gres_job_state_validate in src/common/gres.c).
    tests/fixtures/slurm/scontrol_retyped_gres.txt has the same, as scontrol shows it."""
    op = slurm_lab.backend(slurm_lab.operator)
    jid = _submit(slurm_lab, "alice", "retype")
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    op.update_pending(jid, nodelist=["node2"], num_nodes=1, gres="gpu:g3:1")
    if cleared is not None:
        op.update_pending(jid, gres=cleared)
    op.update_pending(jid, gres=retype)
    shown = slurm_lab.wait_for(jid, {"PENDING"}, held=True).tres_per_node
    assert shown == ",".join(f"gres:{g}" for g in retype.split(","))  # only the new gres is shown
    op.release(jid)
    job = slurm_lab.wait_for(jid, {"RUNNING"})
    assert job.gpus == {"node2": [1, 3]}  # and the old one is granted with it
    out = slurm_lab.wait_for_file(slurm_lab.jobs_dir / f"retype-{jid}.out", "cvd=")
    assert "cvd=1,3" in out or "cvd=3,1" in out


def test_other_user_cannot_touch_a_job_but_the_operator_can(slurm_lab, lab_jobs):
    bob, op = slurm_lab.backend("bob"), slurm_lab.backend(slurm_lab.operator)
    jid = _submit(slurm_lab, "alice", "perm")
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)

    for action in (
        lambda: bob.update_pending(jid, nodelist=["node1"], num_nodes=1, gres="gpu:g0:1"),
        lambda: bob.release(jid),
        lambda: bob.hold(jid),
    ):
        with pytest.raises(SlurmError) as err:
            action()
        assert err.value.permission_denied, err.value.stderr
        assert err.value.returncode != 0 and err.value.command[0] == "scontrol"
    with pytest.raises(SlurmError) as err:
        bob.cancel(jid)
    assert err.value.permission_denied and err.value.command == ["scancel", str(jid)]
    assert slurm_lab.wait_for(jid, {"PENDING"}, held=True).tres_per_node == ""

    # the Operator's hold is an admin hold: the owner may not release it
    op.hold(jid)
    assert slurm_lab.wait_for(jid, {"PENDING"}).reason == "JobHeldAdmin"
    with pytest.raises(SlurmError) as err:
        slurm_lab.backend("alice").release(jid)
    assert err.value.permission_denied

    op.update_pending(jid, nodelist=["node1"], num_nodes=1, gres="gpu:g0:1")
    op.release(jid)
    job = slurm_lab.wait_for(jid, {"RUNNING"})
    assert job.gpus == {"node1": [0]}
    op.cancel(jid)
    slurm_lab.wait_for(jid, {"CANCELLED"})


def test_submit_refused_for_a_foreign_account_or_unknown_qos(slurm_lab):
    alice = slurm_lab.backend("alice")
    with pytest.raises(SlurmError) as err:
        alice.submit(PROBE, ["--hold", "-A", "nlp", "--chdir", str(slurm_lab.jobs_dir)])
    assert "Invalid account" in str(err.value)
    with pytest.raises(SlurmError) as err:
        alice.submit(PROBE, ["--hold", "--qos", "bogus", "--chdir", str(slurm_lab.jobs_dir)])
    assert "Invalid qos" in str(err.value)


def test_shard_of_one_gpu(slurm_lab, lab_jobs):
    carol, op = slurm_lab.backend("carol"), slurm_lab.backend(slurm_lab.operator)
    jid = _submit(slurm_lab, "carol", "shard")
    lab_jobs.append(jid)
    slurm_lab.wait_for(jid, {"PENDING"}, held=True)
    op.update_pending(jid, nodelist=["node3"], num_nodes=1, gres="shard:g6:8")
    op.release(jid)
    job = slurm_lab.wait_for(jid, {"RUNNING"})
    assert job.shards == {"node3": {6: 8}} and job.gpus == {}
    out = slurm_lab.wait_for_file(slurm_lab.jobs_dir / f"shard-{jid}.out", "cvd=")
    assert "host=node3 cvd=6 " in out and "shards=8" in out
    node3 = next(n for n in carol.list_nodes() if n.name == "node3")
    assert 6 in node3.gpus_shared and 6 not in node3.gpus_used


def test_two_node_job_gets_the_same_indices_on_both_nodes(slurm_lab, lab_jobs):
    op = slurm_lab.backend(slurm_lab.operator)
    jid = _submit(slurm_lab, "bob", "multi", ["-A", "nlp", "--qos", "prior", "-t", "10"])
    lab_jobs.append(jid)
    op.update_pending(jid, nodelist=["node3", "node4"], num_nodes=2, gres="gpu:g4:1,gpu:g5:1")
    op.release(jid)
    job = slurm_lab.wait_for(jid, {"RUNNING"})
    assert job.gpus == {"node3": [4, 5], "node4": [4, 5]}
    assert (job.num_nodes, job.qos, job.time_limit_s) == (2, "prior", 600)


def test_finished_jobs_in_history(slurm_lab, lab_jobs):
    alice, root = slurm_lab.backend("alice"), slurm_lab.backend()
    # typed GPUs straight from a user are hivebatch's to place (job_submit.lua): root submits for alice
    ok = root.submit(
        "#!/bin/bash\nexit 0\n",
        [
            "--chdir",
            str(slurm_lab.jobs_dir),
            "-o",
            "/dev/null",
            "--uid=alice",
            "--account=cv",
            "--gres=gpu:g7:1",
            "-w",
            "node4",
            "-J",
            "done-ok",
        ],
    )
    # a name sacct prints as it is: with "|" as its separator, the record read as in state "normal"
    odd = "x|y\n1|1|bob|nlp|normal|COMPLETED"
    bad = alice.submit(
        "#!/bin/bash\nexit 3\n", ["--chdir", str(slurm_lab.jobs_dir), "-o", "/dev/null", "-J", odd]
    )
    lab_jobs.extend([ok, bad])
    slurm_lab.wait_for(ok, {"COMPLETED"})
    failed = slurm_lab.wait_for(bad, {"FAILED"})
    assert failed.exit_code == "3:0" and failed.reason == "NonZeroExitCode"
    deadline = time.monotonic() + 20
    while True:  # slurmdbd records the end a moment after slurmctld, and the name: "allocation" until then
        recs = {r.job_id: r for r in alice.history([ok, bad])}
        ended = (
            recs.get(ok) and recs[ok].state == "COMPLETED" and recs.get(bad) and recs[bad].state == "FAILED"
        )
        if ended and recs[ok].name != "allocation" and recs[bad].name != "allocation":
            break
        assert time.monotonic() < deadline, f"sacct did not record both jobs: {recs}"
        time.sleep(0.5)
    assert recs[ok].gpus == {"node4": [7]} and recs[ok].name == "done-ok" and recs[ok].account == "cv"
    assert recs[bad].exit_code == "3:0" and recs[bad].name == odd and recs[bad].user == "alice"
    assert 1 not in recs
    assert recs[ok].end_time is not None and recs[ok].submit_time <= recs[ok].end_time


def test_unknown_job_is_a_typed_error(slurm_lab):
    with pytest.raises(SlurmError) as err:
        slurm_lab.backend().release(987654)
    assert err.value.unknown_job and err.value.returncode == 1


def _scenario(backend_of, settle):
    """The held-job life cycle; returns what a controller would observe at each step."""
    seen: list[tuple] = []

    def refused(action):
        try:
            action()
        except SlurmError as exc:
            return ("refused", exc.permission_denied, exc.unknown_job)
        return ("accepted",)

    alice, bob, op = backend_of("alice"), backend_of("bob"), backend_of("hbctl")
    jid = alice.submit(PROBE, ["--hold", "-J", "parity", "-o", "/dev/null", "--comment", "parity"])
    j = settle(jid, {"PENDING"})
    seen.append((j.state, j.reason, j.held, j.account, j.qos, j.comment, j.gpus))
    seen.append(refused(lambda: bob.release(jid)))
    op.hold(jid)
    j = settle(jid, {"PENDING"})
    seen.append((j.state, j.reason, j.held))
    seen.append(refused(lambda: alice.release(jid)))
    op.update_pending(jid, nodelist=["node2"], num_nodes=1, gres="gpu:g2:1,gpu:g6:1")
    op.release(jid)
    j = settle(jid, {"RUNNING"})
    seen.append((j.state, j.reason, j.held, j.nodes, j.gpus, j.required_nodes))
    op.requeue_hold(jid)
    j = settle(jid, {"PENDING"})
    seen.append((j.state, j.reason, j.held, j.gpus, j.required_nodes))
    seen.append(refused(lambda: op.requeue_hold(jid)))
    op.cancel(jid)
    j = settle(jid, {"CANCELLED"})
    seen.append((j.state, j.held, j.finished))
    seen.append(refused(lambda: op.release(987654)))
    return jid, seen


def test_fake_backend_observes_what_the_lab_observes(slurm_lab, lab_jobs, fake_slurm):
    def lab_settle(jid, states):
        lab_jobs.append(jid)
        return slurm_lab.wait_for(jid, states)

    def fake_settle(jid, states):
        j = fake_slurm.job(jid)
        assert j.state in states
        return j

    _, on_lab = _scenario(slurm_lab.backend, lab_settle)
    _, on_fake = _scenario(fake_slurm.as_user, fake_settle)
    assert on_fake == on_lab
    assert on_lab[1] == ("refused", True, False) and on_lab[-1] == ("refused", False, True)


def test_opportunistic_job_is_requeued_by_an_urgent_one_after_its_grace(slurm_lab, lab_jobs):
    # Slurm's own preemption between two users' pinned jobs; root submits them (as the controller pins),
    # since GPUs asked by a user go through hivebatch's job_submit plugin instead
    root = slurm_lab.backend()
    common = ["--chdir", str(slurm_lab.jobs_dir), "-o", "/dev/null", "-w", "node4", "--gres=gpu:g2:1"]
    with opportunistic_grace(5):
        opp = root.submit(PROBE, ["--uid=bob", "--account=nlp", "--qos=opportunistic", *common])
        lab_jobs.append(opp)
        slurm_lab.wait_for(opp, {"RUNNING"})
        urgent = root.submit(PROBE, ["--uid=alice", "--account=cv", "--qos=urgent", *common])
        lab_jobs.append(urgent)
        # the victim runs out its QOS's GraceTime, squeue showing since when (squeue_preempt_grace.json)
        told = slurm_lab.wait_for(opp, {"RUNNING"})
        deadline = time.monotonic() + 20
        while told.preempt_time is None and time.monotonic() < deadline:
            time.sleep(0.5)
            (told,) = root.list_jobs([opp])
        assert told.preempt_time is not None and told.grace_end == told.preempt_time + dt.timedelta(seconds=5)
        assert slurm_lab.wait_for(urgent, {"RUNNING"}).gpus == {"node4": [2]}
        j = slurm_lab.wait_for(opp, {"PENDING"})
        assert j.reason == "BeginTime" and not j.held and j.gpus == {}


def test_accounts_and_qos_of_the_lab_match_the_config(slurm_lab):
    be = slurm_lab.backend()
    assert {"cv", "nlp", "sys"} <= set(be.list_accounts())
    assert {"urgent", "prior", "normal", "opportunistic"} <= set(be.list_qos())
