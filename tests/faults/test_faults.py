"""Faults on the lab: slurmctld stopped and restarted (mid-cycle, and with jobs running), the
controller killed with SIGKILL at every step, two controllers on one database, a locked and a
read-only database, hostile numbers. After each: 0 jobs lost, 0 placed twice, 0 GPUs bound twice."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time

import pytest
from faultlab import SCRIPT, FaultLab, Loop, write_config

from hivebatch.bounds import DEFAULT_LIMITS

SPREAD = [("alice", 2), ("bob", 4), ("carol", 1), ("alice", 1), ("bob", 2), ("carol", 2)]


def _submit_spread(faults: FaultLab) -> list[int]:
    return [faults.submit(user, gpus) for user, gpus in SPREAD]


def test_slurmctld_stopped_mid_cycle_and_restarted(faults: FaultLab) -> None:
    _submit_spread(faults)
    loop = Loop(faults.config)
    try:
        loop.wait_line("cycle done", 30)
        # stop slurmctld while the controller cycles: a cycle in flight fails in observe or in act
        t_stop = time.monotonic()
        faults.stop_slurmctld()
        noticed = loop.wait_line("Slurm is unavailable", 60, since=t_stop)
        time.sleep(3)
        t_start = time.monotonic()
        faults.start_slurmctld()
        recovered = loop.wait_line("cycle done", 90, since=t_start)
        faults.rounds += sum(1 for _t, line in loop.seen if "cycle" in line)
    finally:
        loop.stop()
    faults.until_all_run()
    faults.check("slurmctld down mid-cycle", notice_s=noticed - t_stop, recover_s=recovered - t_start)
    assert not [e for e in faults.events() if e.kind == "finished"]


def test_slurmctld_stopped_and_restarted_inside_one_cycle(faults: FaultLab) -> None:
    _submit_spread(faults)
    # 6 placements: the bounce makes at least the 1st fail. Each scontrol update sent while slurmctld is
    # down waits out SlurmctldTimeout (30 s on the lab) before it fails: on a loaded machine the cycle
    # took over 120 s, and slurmctld was left stopped for the tests after it
    res = faults.once(kill_at="ctld-bounce", timeout_s=400)
    assert res.returncode == 1, res.stderr
    failed = [line for line in res.stderr.splitlines() if line.startswith("error: placement of job")]
    # how many more fail depends on how soon the restarted slurmctld takes updates again: until slurmdbd
    # has given a job its DB index it answers "Job update not available right now" (seen on the lab)
    assert 1 <= len(failed) <= 6, res.stderr
    t_end = time.monotonic()
    faults.until_all_run(timeout_s=120)  # the restarted slurmctld hears from its nodes again first
    faults.check("slurmctld bounced inside a cycle", recover_s=time.monotonic() - t_end)


def test_slurmctld_restart_with_running_jobs(faults: FaultLab) -> None:
    _submit_spread(faults)
    faults.until_all_run()
    before = {j: r.placement for j, r in faults.ledger().items()}
    faults.stop_slurmctld()
    t_start = time.monotonic()
    faults.start_slurmctld()
    # until a node registers, a cycle refuses to trust Slurm and changes nothing; nodes not yet
    # registered take no new work (how many register before the first cycle varies from run to run)
    while (res := faults.once()).returncode != 0:
        assert "Slurm is unavailable" in res.stderr.strip().splitlines()[-1], res.stderr
        assert {j: r.placement for j, r in faults.ledger().items()} == before
        assert time.monotonic() - t_start < 90, "the controller did not recover after the restart"
        time.sleep(0.5)
    recovered = time.monotonic() - t_start
    faults.until_all_run()
    assert {j: r.placement for j, r in faults.ledger().items()} == before
    faults.check("slurmctld restart, jobs running", recover_s=recovered)


@pytest.mark.parametrize(
    "step", ["observe", "reconcile", "rebuild", "decide", "intents", "act", "after-first-release", "record"]
)
def test_controller_killed_at_each_step(faults: FaultLab, step: str) -> None:
    for user, gpus in SPREAD[:3]:
        faults.submit(user, gpus)
    faults.until_all_run()
    for user, gpus in SPREAD[3:]:
        faults.submit(user, gpus)
    killed = faults.once(kill_at=step)
    assert killed.returncode == -9, killed.stderr
    faults.until_all_run()
    faults.check("kill -9 at each step")


@pytest.mark.parametrize("faults", ["sqlite", "postgresql"], indirect=True)
def test_two_controllers_on_one_database(faults: FaultLab) -> None:
    _submit_spread(faults)
    other = faults.dir / "other"
    other.mkdir()
    second_config = write_config(other, faults.url)  # another config file, the same database
    loop = Loop(faults.config)
    try:
        loop.wait_line("cycle done", 30)
        results = []

        def race() -> None:
            results.append(faults.once(config=second_config))

        threads = [threading.Thread(target=race) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for res in results:
            assert res.returncode == 1
            assert "another controller holds this database" in res.stderr.strip().splitlines()[-1]
        time.sleep(2)
    finally:
        loop.stop()
    faults.until_all_run()
    faults.check("two controllers, one database")


def test_locked_then_read_only_database(faults: FaultLab) -> None:
    _submit_spread(faults)
    path = faults.url.removeprefix("sqlite:///")
    locker = sqlite3.connect(path, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        res = faults.once()
    finally:
        locker.rollback()
        locker.close()
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith("error: database error: database is locked")
    read_only = faults.dir / "ro.yaml"
    read_only.write_text(
        faults.config.read_text().replace(faults.url, f"sqlite:///file:{path}?mode=ro&uri=true")
    )
    res = faults.once(config=read_only)
    assert res.returncode == 1 and "readonly database" in res.stderr.strip().splitlines()[-1]
    assert not any(r.state != "queued" for r in faults.ledger().values())
    faults.until_all_run()
    faults.check("locked / read-only database")


def test_hostile_numbers_do_not_stop_the_others(faults: FaultLab) -> None:
    # a time limit is Slurm's own number, which it takes whatever it is (sbatch wraps -t into 32 bits:
    # 99999999999999 minutes arrive as 4,285,083,375): such a job is planned as one without a limit
    # and runs. A plain job running under one (no GPUs: not hivebatch's) once failed every cycle,
    # nor did one that waits for a --begin past the last date Python has (the year 275817)
    operator = faults.lab.backend("hbctl")
    plain = ["-A", "hivebatch", "-o", "/dev/null", "--chdir", str(faults.dir)]
    running = operator.submit(SCRIPT.format(sleep=600), [*plain, "-t", "99999999999999"])
    waiting = operator.submit(SCRIPT.format(sleep=600), [*plain, "--begin=now+99999999days"])
    try:
        faults.lab.wait_for(running, {"RUNNING"})
        for t in ("99999999999999", "9999999999", "600000"):
            faults.submit("alice", 1, extra=["-t", t])
        # a model hint is the owner's own: the controller rejects that job alone, with its reason
        hostile = faults.submit("bob", 1, model="resnet50", batch_size=32, iters=999999999999999999)
        faults.submitted.remove(hostile)
        _submit_spread(faults)
        faults.until_all_run()
    finally:
        subprocess.run(["scancel", str(running), str(waiting)], capture_output=True, check=False, timeout=30)
    ledger = faults.ledger()
    assert ledger[hostile].state == "rejected"
    assert ledger[hostile].reason.startswith(
        f"--iters 999999999999999999 is more than hivebatch accepts ({DEFAULT_LIMITS.iters}"
    )
    faults.check("hostile numbers")
