"""The fault suite's tools: jobs on the lab, slurmctld stopped and started, the controller run as its
own process (killed where a test says), and the three invariants every fault test checks."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select

from hivebatch.db import Event, Job, make_engine, make_sessionmaker, migrate
from hivebatch.request import HINT_FIELDS, HINTS_PREFIX, JobRequest
from hivebatch.slurm.cli import CliBackend
from hivebatch.slurm.types import SlurmJob, SlurmUnavailable
from hivebatch.submit.build import gpu_ask_arguments

PROJECT = Path(__file__).resolve().parents[2]
HIVEBATCH = str(Path(sys.executable).parent / "hivebatch")
KILLER = str(Path(__file__).with_name("killed_cycle.py"))
SCRIPT = "#!/bin/bash\nsleep {sleep}\n"
USERS = {"alice": "cv", "bob": "nlp", "carol": "sys"}
#: a job placed again after one of these is not placed twice
REPLACED_AFTER = ("preempted", "requeued", "placement_incident")


@dataclass
class Figures:
    """What a fault test measured (printed at the end of the suite)."""

    rounds: int = 0
    jobs: int = 0
    lost: int = 0
    placed_twice: int = 0
    bound_twice: int = 0
    notice_s: list[float] = field(default_factory=list)
    recover_s: list[float] = field(default_factory=list)


FIGURES: dict[str, Figures] = {}


class Loop:
    """``hivebatch controller run --loop`` in its own process; its log lines stamped as they arrive."""

    def __init__(self, config: Path, interval: float = 1.0) -> None:
        self.proc = subprocess.Popen(
            [HIVEBATCH, "controller", "run", "--loop", "--interval", str(interval), "--config", str(config)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.seen: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put((time.monotonic(), line.rstrip()))

    def wait_line(self, text: str, timeout_s: float, since: float = 0.0) -> float:
        """When (monotonic) a log line containing ``text`` arrived after ``since``."""
        for t, line in self.seen:
            if t >= since and text in line:
                return t
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                t, line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append((t, line))
            if t >= since and text in line:
                return t
        tail = "\n".join(line for _t, line in self.seen[-8:])
        raise AssertionError(f"no log line with {text!r} within {timeout_s:.0f} s; last lines:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class FaultLab:
    lab: Any
    dir: Path
    config: Path
    url: str
    submitted: list[int] = field(default_factory=list)
    rounds: int = 0

    # --- jobs ------------------------------------------------------------------------------------

    def submit(
        self, user: str, gpus: int, sleep: int = 600, extra: list[str] | None = None, **req: Any
    ) -> int:
        request = JobRequest(vc=USERS[user], gpus=gpus, **req)
        # as a student submits: the GPU ask as sbatch options (the job_submit plugin holds the job); model
        # hints written out, not through hints_comment(), so a hostile one reaches Slurm unchecked
        hints = {k: getattr(request, k) for k in HINT_FIELDS if getattr(request, k) is not None}
        args = ["-A", USERS[user], "-q", "normal", "-J", f"fault-{user}", "--chdir", str(self.dir),
                "-o", "/dev/null", "-t", "30", *gpu_ask_arguments(request), *(extra or [])]  # fmt: skip
        if hints:
            args += ["--comment", HINTS_PREFIX + json.dumps(hints, separators=(",", ":"), sort_keys=True)]
        jid = self.lab.backend(user).submit(SCRIPT.format(sleep=sleep), args)
        self.submitted.append(jid)
        return jid

    def slurm_jobs(self) -> dict[int, SlurmJob]:
        return {j.job_id: j for j in CliBackend().list_jobs()}

    def ledger(self) -> dict[int, Job]:
        engine = make_engine(self.url)
        try:
            with make_sessionmaker(engine)() as s:
                return {j.slurm_job_id: j for j in s.scalars(select(Job))}
        finally:
            engine.dispose()

    def events(self) -> list[Event]:
        engine = make_engine(self.url)
        try:
            with make_sessionmaker(engine)() as s:
                return list(s.scalars(select(Event).order_by(Event.id)))
        finally:
            engine.dispose()

    # --- the controller --------------------------------------------------------------------------

    def once(
        self, kill_at: str | None = None, config: Path | None = None, timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """One controller cycle in its own process; ``kill_at`` names the step where it is killed (-9)."""
        argv = [sys.executable, KILLER, kill_at, str(config or self.config)] if kill_at else [
            HIVEBATCH, "controller", "run", "--once", "--config", str(config or self.config)]  # fmt: skip
        self.rounds += 1
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)

    def until_all_run(self, timeout_s: float = 60.0) -> None:
        """Cycles until every submitted job runs in Slurm (and the ledger says so)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            res = self.once()
            jobs, ledger = self.slurm_jobs(), self.ledger()
            if all(jobs.get(j) and jobs[j].state == "RUNNING" and ledger.get(j) and ledger[j].state == "running"
                   for j in self.submitted):  # fmt: skip
                return
            time.sleep(0.5 if res.returncode == 0 else 1.0)
        states = {j: (self.slurm_jobs().get(j), self.ledger().get(j)) for j in self.submitted}
        raise AssertionError("not all jobs run: " + ", ".join(
            f"{j}: slurm {s.state if s else '-'} ledger {g.state if g else '-'} ({g.reason if g else ''})"
            for j, (s, g) in states.items()))  # fmt: skip

    # --- slurmctld -------------------------------------------------------------------------------

    def stop_slurmctld(self) -> None:
        pid = int((self.lab.dir / "run" / "slurmctld.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        raise AssertionError("slurmctld did not stop")

    def start_slurmctld(self) -> None:
        subprocess.run(["slurmctld", "-i"], check=True, timeout=30, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if subprocess.run(["scontrol", "ping"], capture_output=True, check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError("slurmctld did not come back")

    def ensure_slurmctld(self) -> None:
        """slurmctld up, started again if a test before this one left it stopped (its failure stays its
        own instead of failing every test after it)."""
        if subprocess.run(["scontrol", "ping"], capture_output=True, check=False).returncode == 0:
            return
        pid_file = self.lab.dir / "run" / "slurmctld.pid"
        try:
            os.kill(int(pid_file.read_text()), 0)
            return  # it is there, only slow to answer: the test will say so
        except (OSError, ValueError):
            pass
        self.start_slurmctld()
        self.wait_registered()

    def wait_registered(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                nodes = CliBackend().list_nodes()
            except SlurmUnavailable:
                nodes = []
            if nodes and all(n.responding for n in nodes):
                return
            time.sleep(0.5)
        raise AssertionError("the nodes did not register again")

    # --- invariants ------------------------------------------------------------------------------

    def check(self, name: str, notice_s: float | None = None, recover_s: float | None = None) -> Figures:
        """0 jobs lost, 0 placed twice, 0 GPUs bound twice (Slurm's IDX against each other and the ledger)."""
        jobs, ledger, events = self.slurm_jobs(), self.ledger(), self.events()
        lost = [j for j in self.submitted if j not in ledger or (
            jobs.get(j) is not None and not jobs[j].finished and ledger[j].state in ("done", "failed", "cancelled"))]  # fmt: skip
        kinds = Counter((e.slurm_job_id, e.kind) for e in events)
        twice = [j for j in self.submitted
                 if kinds[(j, "placed")] > 1 + sum(kinds[(j, k)] for k in REPLACED_AFTER)]  # fmt: skip
        holders: Counter[tuple[str, int]] = Counter()
        mismatched = []
        for sj in jobs.values():
            if sj.state != "RUNNING":
                continue
            for node, idx in sj.gpus.items():
                holders.update((node, i) for i in idx)
            row = ledger.get(sj.job_id)
            if sj.job_id in self.submitted and (row is None or row.placement != sj.gpus):
                mismatched.append(sj.job_id)
        bound_twice = [g for g, n in holders.items() if n > 1]
        fig = FIGURES.setdefault(name, Figures())
        fig.rounds += self.rounds
        fig.jobs += len(self.submitted)
        fig.lost += len(lost)
        fig.placed_twice += len(twice)
        fig.bound_twice += len(bound_twice) + len(mismatched)
        if notice_s is not None:
            fig.notice_s.append(notice_s)
        if recover_s is not None:
            fig.recover_s.append(recover_s)
        self.rounds = 0
        assert not lost, f"jobs lost: {lost}"
        assert not twice, f"jobs placed twice: {twice}"
        assert not bound_twice and not mismatched, (
            f"GPUs bound twice: {bound_twice}; ledger ≠ Slurm: {mismatched}"
        )
        return fig

    def cancel_all(self) -> None:
        for user in USERS:
            subprocess.run(["scancel", "-u", user], capture_output=True, check=False, timeout=30)
        # until the nodes have ended them: squeue's JSON shows such a job CANCELLED at once, its text
        # state COMPLETING. A slurmctld stopped meanwhile waits for those ends before it exits (seen
        # on the lab: 57 s, which ran a bounced cycle past its time limit)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = subprocess.run(["squeue", "-h", "-t", "CF,R,CG,S", "-u", ",".join(USERS), "-o", "%i"],
                                    capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
            if listed.returncode == 0 and not listed.stdout.strip():
                return
            time.sleep(0.3)


def write_config(base: Path, url: str) -> Path:
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    data["controller"] = {"interval_s": 1}
    data["database"] = {"url": url}
    cfg = base / "hivebatch.yaml"
    cfg.write_text(yaml.safe_dump(data))
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return cfg
