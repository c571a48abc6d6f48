"""The controller on the real lab, for tests of any module: ``ctl`` gives each test its own config,
ledger (SQLite or PostgreSQL) and a controller that sees only the pending jobs the test adopted."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from hivebatch.controller.context import load_context
from hivebatch.controller.cycle import CycleReport, run_cycle
from hivebatch.controller.usage import write_usage
from hivebatch.db import Event, Job, make_engine, make_sessionmaker, migrate
from hivebatch.replay.live import ScopedBackend  # the controller sees only the test's pending jobs
from hivebatch.request import JobRequest
from hivebatch.submit.build import gpu_ask_arguments

PROJECT = Path(__file__).resolve().parents[2]
PROBE = """#!/bin/bash
echo "run host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES"
sleep {sleep}
"""


@dataclass
class Ctl:
    lab: Any
    ctx: Any
    factory: Any
    backend: ScopedBackend
    mine: set[int]
    jobs_dir: Path
    tag: str
    config: Path
    db_url: str

    def submit(
        self, user: str, vc: str, gpus: int, qos: str = "normal", sleep: int = 120, extra: Sequence[str] = ()
    ) -> int:
        req = JobRequest(vc=vc, qos=qos, gpus=gpus, time_limit_s=600)
        name = f"{self.tag}-{user}"
        # as a student would: plain sbatch options, the GPU ask included; the job_submit plugin holds it
        args = [
            "-A",
            vc,
            "-q",
            qos,
            "-J",
            name,
            "-t",
            "10",
            "--chdir",
            str(self.jobs_dir),
            "-o",
            str(self.jobs_dir / f"{name}-%j.out"),
            "--open-mode=append",
            *gpu_ask_arguments(req),
            *extra,  # sbatch takes an option's last value: these may override the ones above
        ]
        jid = self.lab.backend(user).submit(PROBE.format(sleep=sleep), args)
        self.mine.add(jid)
        return jid

    def output(self, jid: int, user: str) -> Path:
        return self.jobs_dir / f"{self.tag}-{user}-{jid}.out"

    def cycle(self) -> CycleReport:
        report = run_cycle(self.ctx, self.factory, self.backend)
        assert report.ok, report.failures
        return report

    def job(self, jid: int) -> Job:
        with self.factory() as s:
            return s.scalars(select(Job).where(Job.slurm_job_id == jid)).one()

    def placed_event(self, jid: int) -> str:
        """What the controller said when it placed the job (its reason is gone once the job runs)."""
        return next(iter(self.events(jid, "placed")), "")

    def events(self, jid: int, kind: str) -> list[str]:
        """The messages of the job's events of ``kind``, oldest first."""
        with self.factory() as s:
            q = select(Event.message).where(Event.slurm_job_id == jid, Event.kind == kind).order_by(Event.id)
            return [str(m) for m in s.scalars(q)]

    def until(self, check: Callable[[], bool], timeout_s: float = 45.0, what: Any = "") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.cycle()
            if check():
                return
            time.sleep(1.0)
        raise AssertionError(f"not reached within {timeout_s:.0f} s: {what() if callable(what) else what}")


@pytest.fixture(params=["sqlite", "postgresql"])
def ctl(
    request: pytest.FixtureRequest, slurm_lab: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Ctl]:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    data["controller"] = {"lock_file": "ctl.lock", "interval_s": 1}
    data["preemption"] = {"notice_s": 3}  # a victim's notice, short enough for a test to wait it out
    # The example VCs hold all 32 GPUs, so any GPU another test (or a stale Slurm shard count) keeps busy
    # would cost some VC its guarantee; one node of slack keeps these tests independent of such noise.
    data["virtual_clusters"]["nlp"] = {"cells": {"V100-NODE": 1}}
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_database")
    else:
        url = f"sqlite:///{tmp_path / 'hb.db'}"
    data["database"] = {"url": url}
    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text(yaml.safe_dump(data))
    ctx = load_context(cfg, publish=True)
    # this test's controller writes its own VCs beside slurmctld's plugin, which prefers them while they
    # are fresh: the next test gets back the file it would have found
    assert ctx.nodes_path is not None
    nodes_file = ctx.nodes_path.read_bytes() if ctx.nodes_path.exists() else None
    engine = make_engine(url)
    migrate.upgrade(engine)
    mine: set[int] = set()
    backend = ScopedBackend(slurm_lab.backend(slurm_lab.operator), mine)
    tag = f"hbc{uuid.uuid4().hex[:6]}"
    c = Ctl(slurm_lab, ctx, make_sessionmaker(engine), backend, mine, slurm_lab.jobs_dir, tag, cfg, url)
    try:
        yield c
    finally:
        for jid in mine:
            subprocess.run(["scancel", str(jid)], capture_output=True, check=False, timeout=30)
        _wait_gone(backend.inner, mine)
        engine.dispose()
        if nodes_file is None:
            ctx.nodes_path.unlink(missing_ok=True)
        else:
            write_usage(ctx.nodes_path, nodes_file.decode())


def _wait_gone(backend: Any, ids: set[int], timeout_s: float = 60.0) -> None:
    """Cancelled jobs hold their GPUs until Slurm has cleaned up: the next test must not see them."""
    deadline = time.monotonic() + timeout_s
    while ids and time.monotonic() < deadline:
        busy = [
            j for j in backend.list_jobs(sorted(ids)) if j.state in ("RUNNING", "COMPLETING", "CONFIGURING")
        ]
        nodes_busy = any(n.gpus_used for n in backend.list_nodes())
        if not busy and not nodes_busy:
            return
        time.sleep(0.5)
