"""Preemption with notice on the real lab: an opportunistic job that asked for ``--signal=B:USR1@20``
runs hsub's job script around a script whose ``trap`` writes a checkpoint; a guaranteed job needs its
GPUs. The victim's trap runs (the signal reached the batch shell, and the wrapper passed it on), the
victim is requeued held, and the guaranteed job starts after it left."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator, Sequence

import pytest
import yaml
from lab_controller import Ctl
from lab_qos import opportunistic_grace

from hivebatch.controller.context import load_context
from hivebatch.submit.script import render_job_script

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("ctl", ["sqlite"], indirect=True)]

USER_SCRIPT = """#!/bin/bash
trap 'echo "saved at $(date +%s)" > "ckpt-$SLURM_JOB_ID"; exit 0' USR1
echo "started $SLURM_JOB_ID"
sleep 600 & wait
"""


def _with_notice(ctl: Ctl, seconds: int) -> None:
    data = yaml.safe_load(ctl.config.read_text())
    data["preemption"] = {"notice_s": seconds}
    ctl.config.write_text(yaml.safe_dump(data))
    ctl.ctx = load_context(ctl.config)


def _opportunistic(
    ctl: Ctl, n: int, asks: Sequence[str] = ("--gres=gpu:8",), signal_given: str = "in the script"
) -> list[int]:
    """carol's opportunistic jobs, whose --signal=B:USR1@20 is one of the script's #SBATCH lines or, as
    sbatch's own option, on the command line."""
    in_script = signal_given == "in the script"
    script = render_job_script(USER_SCRIPT, [], "sys", "opportunistic",
                               directives=["--signal=B:USR1@20"] if in_script else [])  # fmt: skip
    ids = []
    for i in range(n):
        name = f"{ctl.tag}-opp{i}"
        signal = [] if in_script else ["--signal=B:USR1@20"]
        args = ["-A", "sys", "-q", "opportunistic", "-J", name, "-t", "10", *asks, *signal, "--requeue",
                "--chdir", str(ctl.jobs_dir), "-o", str(ctl.jobs_dir / f"{name}-%j.out"), "--open-mode=append"]  # fmt: skip
        jid = ctl.lab.backend("carol").submit(script, args)
        ctl.mine.add(jid)
        ids.append(jid)
    return ids


# on the command line the signal was lost before the cli_filter passed it on (cli_filter_signal.txt):
# the victim got SIGTERM and left without its checkpoint
@pytest.mark.parametrize("signal_given", ["in the script", "on sbatch's command line"])
def test_victim_checkpoints_on_its_signal_is_requeued_held_and_the_owner_starts_after(
    ctl: Ctl, signal_given: str
) -> None:
    _with_notice(ctl, 60)
    opp = _opportunistic(ctl, 4, signal_given=signal_given)  # the whole cluster
    ctl.until(
        lambda: all(ctl.job(j).state == "running" for j in opp), what=lambda: [ctl.job(j).reason for j in opp]
    )
    time.sleep(2)  # the jobs' shells have set their traps
    owner = ctl.submit("alice", "cv", 8, qos="prior", sleep=30)
    ctl.cycle()
    told = [j for j in opp if ctl.job(j).notice_until is not None or ctl.job(j).state == "preempted"]
    assert len(told) == 1, [ctl.job(j).reason for j in opp]
    (victim,) = told
    assert ctl.job(owner).state == "queued" and f"waiting for job {victim} to leave" in (
        ctl.job(owner).reason or ""
    )
    # the trap ran: the checkpoint file exists, and the job left well before its 20 s notice ended
    ckpt = ctl.lab.wait_for_file(ctl.jobs_dir / f"ckpt-{victim}", "saved at", timeout_s=20)
    saved_at = int(ckpt.split()[-1])
    ctl.until(
        lambda: ctl.job(owner).state in ("placed", "running"),
        timeout_s=40,
        what=lambda: ctl.job(owner).reason,
    )
    held = ctl.lab.wait_for(victim, {"PENDING"}, held=True, timeout_s=20)
    assert held.reason == "job_requeued_in_held_state"
    assert ctl.job(victim).state == "preempted" and ctl.job(victim).preemptions == 1
    ctl.until(lambda: ctl.job(owner).state == "running", timeout_s=40, what=lambda: ctl.job(owner).reason)
    started = ctl.job(owner).start_time
    assert started is not None and started >= dt.datetime.fromtimestamp(saved_at, dt.UTC).replace(tzinfo=None)
    assert ctl.job(owner).placement == ctl.job(victim).placement


@pytest.fixture
def short_grace(ctl: Ctl) -> Iterator[int]:
    """The opportunistic QOS's GraceTime made short, as the controller's notice: Slurm's preemption for
    CPUs and memory gives that notice too."""
    with opportunistic_grace(30) as seconds:
        _with_notice(ctl, seconds)
        yield seconds


def test_a_guaranteed_job_goes_where_opportunistic_jobs_hold_the_cpus_and_slurm_gives_them_notice(
    ctl: Ctl, short_grace: int
) -> None:
    # with every node's CPUs held by opportunistic jobs on few GPUs, alice's guaranteed job held no pin and
    # waited "node1: 0 CPUs free, the job needs 4" until they ended; a job of a QOS that preempts
    # opportunistic, released there, starts as Slurm preempts them (preempt_qos_node_resources.txt), which
    # gives them their QOS's GraceTime and their own --signal first (preempt_grace.txt)
    opp = _opportunistic(ctl, 8, ["-c", "8", "--gres=gpu:1"])
    ctl.until(
        lambda: all(ctl.job(j).state == "running" for j in opp), what=lambda: [ctl.job(j).reason for j in opp]
    )
    time.sleep(2)  # the jobs' shells have set their traps
    ran_on = {j: set(ctl.job(j).placement or {}) for j in opp}
    owner = ctl.submit("alice", "cv", 1, extra=["-c", "4"])
    ctl.until(lambda: ctl.job(owner).state == "running", timeout_s=60, what=lambda: ctl.job(owner).reason)
    # one job's CPUs were enough: it got its USR1 from Slurm, saved and left at once, well within its grace
    saved = [j for j in opp if (ctl.jobs_dir / f"ckpt-{j}").exists()]
    assert len(saved) == 1, saved
    (victim,) = saved
    assert ran_on[victim] == set(ctl.job(owner).placement or {})
    saved_at = int((ctl.jobs_dir / f"ckpt-{victim}").read_text().split()[-1])
    started = ctl.job(owner).start_time
    assert started is not None and started >= dt.datetime.fromtimestamp(saved_at, dt.UTC).replace(tzinfo=None)
    assert (started - ctl.job(owner).placed_at).total_seconds() < short_grace  # type: ignore[operator]
    # it exited 0 (COMPLETED, which Slurm does not requeue): the controller requeued it held, to resume
    ctl.until(lambda: ctl.job(victim).state == "preempted", timeout_s=20, what=lambda: ctl.job(victim).reason)
    (told,) = ctl.events(victim, "notice")
    assert told.startswith("Slurm preempts it for a higher-priority job's CPUs or memory") and ctl.events(
        victim, "preempted"
    )
    assert (
        ctl.lab.wait_for(victim, {"PENDING"}, held=True, timeout_s=20).reason == "job_requeued_in_held_state"
    )
    assert ctl.events(owner, "act_failed") == []
