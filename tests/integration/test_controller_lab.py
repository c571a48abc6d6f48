"""The controller on the real Slurm lab, with the lab's users: pinning, fragmentation, preemption,
bad nodes, a controller killed mid-cycle — on SQLite, and the whole life of a job (placed, run,
preempted and resumed, a cycle killed half-way) on PostgreSQL too. What only PostgreSQL does (its
locks, concurrent writers, the reports' queries) is tested in test_db_postgres.py and
test_reports_postgres.py; the other cases here do not touch the database differently.

The controller under test sees every running job of the lab (they occupy GPUs) but only the pending
jobs this test submitted, so it never places another test's held jobs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lab_controller import Ctl
from lab_users import run_as
from sqlalchemy import select

from hivebatch.db import Event

pytestmark = pytest.mark.integration
sqlite_only = pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)

PROJECT = Path(__file__).resolve().parents[2]


def _running_on(ctl: Ctl, jid: int) -> dict[str, list[int]]:
    jobs = ctl.backend.inner.list_jobs([jid])
    return jobs[0].gpus if jobs and jobs[0].state == "RUNNING" else {}


def _alice_running(ctl: Ctl) -> tuple[int, dict[str, list[int]]]:
    """Alice's 2-GPU job, placed and running in Slurm and in the ledger; its id and placement."""
    jid = ctl.submit("alice", "cv", 2)
    ctl.cycle()
    ctl.lab.wait_for(jid, {"RUNNING"})
    ctl.until(lambda: ctl.job(jid).state == "running", what="ledger shows it running")
    return jid, ctl.job(jid).placement


def test_alice_job_runs_on_exactly_the_gpus_the_cells_chose(ctl: Ctl) -> None:
    jid = ctl.submit("alice", "cv", 2, qos="prior")
    report = ctl.cycle()
    assert report.placed == 1
    job = ctl.job(jid)
    ((node, idx),) = job.placement.items()
    assert len(idx) == 2 and job.gres == ",".join(f"gpu:g{i}:1" for i in idx)
    ctl.lab.wait_for(jid, {"RUNNING"})
    out = ctl.lab.wait_for_file(ctl.output(jid, "alice"), "cvd=")
    assert f"run host={node} cvd={','.join(str(i) for i in idx)}" in out
    ctl.until(lambda: ctl.job(jid).state == "running", what="ledger shows it running")
    assert _running_on(ctl, jid) == {node: idx}


def test_a_job_named_with_a_thousand_characters_is_placed_and_keeps_its_name(ctl: Ctl) -> None:
    # Slurm took a 1,000-character job name on the lab; on PostgreSQL the ledger's VARCHAR(256) failed
    # the cycle that met it, for every job
    name = "n" * 1000
    jid = ctl.submit("alice", "cv", 1, extra=["-J", name])
    assert ctl.cycle().placed == 1
    assert ctl.job(jid).name == name


@sqlite_only
def test_node_cell_job_runs_while_another_vc_fragments_the_cluster(ctl: Ctl) -> None:
    small = [ctl.submit("carol", "sys", 1) for _ in range(3)] + [
        ctl.submit("alice", "cv", 1) for _ in range(3)
    ]
    ctl.cycle()
    for jid in small:
        assert ctl.job(jid).state in ("placed", "running"), ctl.job(jid).reason
    big = ctl.submit("bob", "nlp", 8)
    ctl.cycle()
    assert ctl.job(big).state in ("placed", "running"), ctl.job(big).reason
    ctl.lab.wait_for(big, {"RUNNING"})
    ((node, idx),) = _running_on(ctl, big).items()
    assert idx == list(range(8))
    small_nodes = {n for jid in small for n in ctl.job(jid).placement}
    assert node not in small_nodes  # the small jobs were packed away from the node nlp's cell needed


@sqlite_only
def test_a_job_past_its_deadline_ends_as_slurm_ends_it(ctl: Ctl) -> None:
    # sys's switch cell is its only room for 2 GPUs on one node (tests/fixtures/slurm/deadline_held.txt
    # shows the same under plain Slurm and, before, a held job Slurm never tested)
    blocker = ctl.submit("carol", "sys", 2)
    ctl.cycle()
    assert ctl.job(blocker).state in ("placed", "running"), ctl.job(blocker).reason
    late = ctl.submit("carol", "sys", 2, sleep=20, extra=["-t", "1", "--deadline", "now+75seconds"])
    ctl.cycle()
    assert ctl.job(late).state == "queued", ctl.job(late).reason
    # 1 min of limit from now ends after the deadline 15 s from now (plus the 2 s of margin)
    ctl.until(lambda: ctl.job(late).state == "failed", timeout_s=60, what=lambda: ctl.job(late).reason)
    (ended,) = ctl.backend.inner.list_jobs([late])
    assert (ended.state, ended.reason) == ("DEADLINE", "DeadLine")
    assert ended.start_time is not None and ended.deadline is not None
    assert ended.start_time <= ended.deadline  # ended before its deadline, not placed after it


@sqlite_only
def test_a_job_its_owner_requeue_holds_waits_until_they_release_it(ctl: Ctl) -> None:
    # plain Slurm keeps it held until its owner releases it (tests/fixtures/slurm/requeuehold_owner.txt)
    jid, placed = _alice_running(ctl)
    ctl.lab.backend("alice").requeue_hold(jid)
    for _ in range(4):
        ctl.cycle()
        time.sleep(1.0)
    (held,) = ctl.backend.inner.list_jobs([jid])
    assert held.state == "PENDING" and held.held, held
    reason = ctl.job(jid).reason or ""
    assert reason.startswith(f"held by its owner: scontrol release {jid}"), reason
    ctl.lab.backend("alice").release(jid)
    ctl.until(lambda: ctl.job(jid).state == "running", what=lambda: ctl.job(jid).reason)
    assert _running_on(ctl, jid) == placed  # on the GPU indices it kept


@sqlite_only
def test_a_job_an_admin_holds_waits_until_an_admin_releases_it(ctl: Ctl) -> None:
    # seen on the lab: the controller released an admin's `scontrol hold` as soon as the job's VC had room
    # (tests/fixtures/slurm/admin_hold_marked.txt)
    jid = ctl.submit("alice", "cv", 2, sleep=5)
    subprocess.run(["scontrol", "hold", str(jid)], check=True, capture_output=True)
    for _ in range(3):
        ctl.cycle()
        time.sleep(1.0)
    (held,) = ctl.backend.inner.list_jobs([jid])
    assert held.state == "PENDING" and held.held and held.reason == "JobHeldAdmin", held
    job = ctl.job(jid)
    assert job.state == "queued" and not job.placement, (job.state, job.reason)
    assert job.reason == f"held by an admin: it waits until an admin releases it (scontrol release {jid})"
    # the controller's own holds stay its own: a job it takes back is placed again without an admin
    subprocess.run(["scontrol", "release", str(jid)], check=True, capture_output=True)
    ctl.until(lambda: ctl.job(jid).state in ("running", "done"), what=lambda: ctl.job(jid).reason)


@sqlite_only
def test_an_admins_release_of_a_job_that_kept_its_gpus_waits_for_the_controller(ctl: Ctl) -> None:
    # a job requeued (or a pin taken back) keeps its typed gres; an admin's release let Slurm start it on
    # those GPUs after its requeue delay, outside the cells (tests/fixtures/slurm/kept_gpus_parked.txt)
    jid, placed = _alice_running(ctl)
    subprocess.run(["scontrol", "requeue", str(jid)], check=True, capture_output=True)
    ctl.lab.wait_for(jid, {"PENDING"})
    ctl.cycle()  # it sees the requeue and holds the job
    (held,) = ctl.backend.inner.list_jobs([jid])
    assert held.held and held.tres_per_node, held
    subprocess.run(["scontrol", "release", str(jid)], check=True, capture_output=True)
    time.sleep(15)  # past the lab's 11 s requeue delay
    (waiting,) = ctl.backend.inner.list_jobs([jid])
    assert waiting.state == "PENDING" and waiting.reason == "BeginTime", waiting
    ctl.until(lambda: ctl.job(jid).state == "running", what=lambda: ctl.job(jid).reason)
    assert _running_on(ctl, jid) == placed  # on the GPU indices it kept


def test_opportunistic_job_is_preempted_for_the_owner_and_resumes(ctl: Ctl) -> None:
    opp = [ctl.submit("carol", "sys", 8, qos="opportunistic", sleep=300) for _ in range(4)]
    ctl.cycle()
    placed = [j for j in opp if ctl.job(j).state in ("placed", "running")]
    assert placed, [ctl.job(j).reason for j in opp]
    for j in placed:
        ctl.lab.wait_for(j, {"RUNNING"})
    ctl.cycle()
    owner = ctl.submit("alice", "cv", 8, qos="prior", sleep=5)
    ctl.cycle()
    # the victim gets its notice (3 s in this config) and SIGTERM; the owner waits for it to leave
    assert "to leave its GPUs, notice ends at" in (ctl.job(owner).reason or ""), ctl.job(owner).reason
    ctl.until(lambda: ctl.job(owner).state in ("placed", "running"), what=lambda: ctl.job(owner).reason)
    (victim,) = [j for j in placed if ctl.job(j).state == "preempted"]
    held = ctl.lab.wait_for(victim, {"PENDING"}, held=True)
    assert held.reason == "job_requeued_in_held_state"
    owner_job = ctl.job(owner)
    ctl.lab.wait_for(owner, {"RUNNING", "COMPLETED"}, timeout_s=60)
    out = ctl.lab.wait_for_file(ctl.output(owner, "alice"), "cvd=")
    ((node, idx),) = owner_job.placement.items()
    assert f"run host={node} cvd={','.join(map(str, idx))}" in out
    # the owner's short job ends; the victim resumes on the same GPU indices and runs a second time
    ctl.until(
        lambda: ctl.job(victim).state == "running",
        timeout_s=90,
        what=lambda: (
            f"the preempted job resumes: {ctl.job(victim).state} {ctl.job(victim).reason} "
            f"{ctl.backend.inner.list_jobs([victim])}"
        ),
    )
    runs = ctl.lab.wait_for_file(ctl.output(victim, "carol"), "run host", timeout_s=30)
    deadline = time.monotonic() + 30
    while runs.count("run host") < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        runs = ctl.output(victim, "carol").read_text()
    assert runs.count("run host") == 2
    with ctl.factory() as s:
        kinds = [
            e.kind for e in s.scalars(select(Event).where(Event.slurm_job_id == victim).order_by(Event.id))
        ]
    assert kinds.count("preempted") == 1 and kinds.count("placed") == 2


@sqlite_only
def test_a_job_its_full_vc_keeps_waiting_is_told_how_to_run_on_idle_gpus(ctl: Ctl) -> None:
    # seen on the lab: alice's VC full, two nodes idle, and her job's reason said only when cv frees room
    running = [ctl.submit("alice", "cv", g, sleep=300) for g in (8, 4)]
    ctl.until(lambda: all(ctl.job(j).state in ("placed", "running") for j in running))
    waiting = ctl.submit("alice", "cv", 2)
    ctl.cycle()
    reason = ctl.job(waiting).reason or ""
    command = f"scontrol update job {waiting} qos=opportunistic"
    assert ctl.job(waiting).state == "queued" and reason.endswith(command), reason
    # Slurm lets the owner move a pending job to the opportunistic QOS; the next cycle places it
    done = run_as("alice", command.split())
    assert done.returncode == 0, done.stderr
    ctl.until(lambda: ctl.job(waiting).state in ("placed", "running"), what=lambda: ctl.job(waiting).reason)
    assert ctl.job(waiting).qos == "opportunistic" and ctl.job(waiting).priority == -1


@sqlite_only
@pytest.mark.parametrize("state", ["down", "drain"])
def test_down_or_drained_node_is_avoided(ctl: Ctl, state: str) -> None:
    nodes = {n.name: n for n in ctl.backend.list_nodes()}
    idle = [n for n in sorted(nodes) if not nodes[n].gpus_used and not nodes[n].bad]
    assert idle, "no idle node in the lab to take down"
    victim_node = idle[0]
    subprocess.run(
        ["scontrol", "update", f"nodename={victim_node}", f"state={state}", "reason=hivebatch-test"],
        check=True,
    )
    try:
        ctl.cycle()
        ids = [ctl.submit("bob", "nlp", 4) for _ in range(2)] + [ctl.submit("alice", "cv", 4)]
        ctl.cycle()
        used = {n for jid in ids for n in (ctl.job(jid).placement or {})}
        assert used and victim_node not in used
        with ctl.factory() as s:
            bad = s.scalars(select(Event).where(Event.kind == "node_bad")).all()
        assert victim_node in {e.data["node"] for e in bad}
    finally:
        subprocess.run(["scontrol", "update", f"nodename={victim_node}", "state=resume"], check=False)
    ctl.until(
        lambda: victim_node not in {n.name for n in ctl.backend.list_nodes() if n.bad}, what="node resumed"
    )


RUNNER = textwrap.dedent(
    """
    import sys, time
    from hivebatch.controller.context import load_context
    from hivebatch.controller.cycle import run_cycle
    from hivebatch.db import open_database
    from hivebatch.slurm.cli import CliBackend

    cfg, ids = sys.argv[1], {int(x) for x in sys.argv[2].split(",")}

    class Slow:
        def __init__(self, inner):
            self.inner = inner
        def list_jobs(self, job_ids=None):
            return [j for j in self.inner.list_jobs(job_ids) if j.job_id in ids or j.state == "RUNNING"]
        def update_pending(self, *a, **kw):
            self.inner.update_pending(*a, **kw)
            print("updated", flush=True)
            time.sleep(60)   # killed here: Slurm has the gres, the job is still held, the DB says 'place'
        def __getattr__(self, name):
            return getattr(self.inner, name)

    ctx = load_context(cfg)
    engine, factory = open_database(ctx.config_path, ctx.data)
    run_cycle(ctx, factory, Slow(CliBackend(run_as="hbctl")))
    """
)


def test_killing_the_controller_mid_cycle_loses_nothing(ctl: Ctl) -> None:
    jid = ctl.submit("bob", "nlp", 2)
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(ctl.config), str(jid)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HIVEBATCH_DATABASE_URL": ""},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "updated", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    intended = ctl.job(jid)
    assert intended.intent == "place" and intended.placement
    assert ctl.lab.wait_for(jid, {"PENDING"}, held=True)  # killed before the release
    ctl.cycle()
    ctl.lab.wait_for(jid, {"RUNNING"})
    ctl.until(lambda: ctl.job(jid).state == "running", what="running after the rerun")
    assert _running_on(ctl, jid) == intended.placement  # the placement the killed cycle chose, once
    with ctl.factory() as s:
        placed = s.scalars(select(Event).where(Event.slurm_job_id == jid, Event.kind == "placed")).all()
    assert len(placed) == 1
