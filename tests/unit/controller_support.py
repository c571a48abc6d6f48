"""Shared set-up for the controller unit tests: the lab config, a migrated SQLite ledger, a fake Slurm."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from hivebatch.controller import observe
from hivebatch.controller.context import ControllerContext, load_context
from hivebatch.controller.cycle import CycleReport, run_cycle
from hivebatch.db import Base, Event, Job, open_database
from hivebatch.request import JobRequest
from hivebatch.submit.build import gpu_ask_arguments
from hivebatch.testing.fake_slurm import FakeSlurm
from hivebatch.testing.lua_job_submit import LuaJobSubmit

CONFIG = """
cluster:
  cell_types:
    V100: {memory: 32G}
    V100-SWITCH: {child: V100, count: 2}
    V100-SOCKET: {child: V100-SWITCH, count: 2}
    V100-NODE: {child: V100-SOCKET, count: 2, node: true}
  physical_cells:
    - {type: V100-NODE, nodes: [node1]}
    - {type: V100-NODE, nodes: [node2]}
    - {type: V100-NODE, nodes: [node3]}
    - {type: V100-NODE, nodes: [node4]}
virtual_clusters:
  cv: {cells: {V100-NODE: 1, V100-SOCKET: 1}}
  nlp: {cells: {V100-NODE: 2}}
  sys: {cells: {V100-SWITCH: 1, V100: 2}}
database: {url: "sqlite:///var/hb.db"}
controller: {lock_file: var/ctl.lock, interval_s: 1}
# these scenarios follow what comes after a requeue; test_controller_notice.py runs the notice before it
preemption: {notice_s: 0}
"""

#: the same cluster with the default preemption notice (120 s)
NOTICE_CONFIG = CONFIG.replace("preemption: {notice_s: 0}\n", "")

SCRIPT = "#!/bin/sh\necho $CUDA_VISIBLE_DEVICES\n"


@dataclass
class Env:
    ctx: ControllerContext
    factory: sessionmaker[Session]
    slurm: FakeSlurm

    @property
    def ctl(self) -> FakeSlurm:
        return self.slurm.as_user("hbctl")

    def cycle(self, backend: Any | None = None) -> CycleReport:
        return run_cycle(self.ctx, self.factory, backend or self.ctl)

    def submit(
        self,
        user: str,
        vc: str,
        gpus: int,
        qos: str = "normal",
        account: str | None = None,
        extra: list[str] | None = None,
        **fields: Any,
    ) -> int:
        """Submit as ``user`` the way a student does (sbatch options); the job_submit plugin turns the GPU
        ask into the hivebatch request and holds the job, as slurmctld does."""
        req = JobRequest(vc=vc, qos=qos, gpus=gpus, **fields)
        args = ["-A", account or vc, "-q", qos, "-J", f"{user}-job", *gpu_ask_arguments(req)]
        if req.hints_comment():
            args += ["--comment", req.hints_comment()]
        if req.time_limit_s:
            args += ["-t", str(-(-req.time_limit_s // 60))]
        return self.slurm.as_user(user).submit(SCRIPT, args + list(extra or []))

    def job(self, slurm_id: int) -> Job:
        with self.factory() as s:
            return s.scalars(select(Job).where(Job.slurm_job_id == slurm_id)).one()

    def events(self, slurm_id: int | None = None, kind: str | None = None) -> list[Event]:
        with self.factory() as s:
            q = select(Event).order_by(Event.id)
            if slurm_id is not None:
                q = q.where(Event.slurm_job_id == slurm_id)
            if kind is not None:
                q = q.where(Event.kind == kind)
            return list(s.scalars(q))


def make_env(tmp_path: Path, config: str = CONFIG, **fake_args: Any) -> Env:
    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text(config)
    ctx = load_context(cfg)
    engine, factory = open_database(cfg, ctx.data)
    Base.metadata.create_all(engine)
    fake_args.setdefault("job_submit", LuaJobSubmit(ctx.data))
    fake = FakeSlurm(accounts={"alice": ["cv"], "bob": ["nlp"], "carol": ["sys"]}, **fake_args)
    return Env(ctx=ctx, factory=factory, slurm=fake)


def lua_read(path: Path, expr: str) -> str:
    """``expr`` over the table a controller file returns (as ``u``), loaded the way the job_submit
    plugin loads it (an empty environment)."""
    lua = shutil.which("lua5.1")
    assert lua, "lua5.1 is missing (scripts/test installs it)"
    probe = f"local c = assert(loadfile({str(path)!r})); setfenv(c, {{}}); local u = c(); io.write(tostring({expr}))"
    out = subprocess.run([lua, "-e", probe], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def with_notes_file(env: Env, tmp_path: Path) -> Env:
    """The controller reads the job_submit plugin's notes, as the one serving slurmctld does: the file
    lies in a directory only its owner writes (refusals.unsafe)."""
    notes = tmp_path / "spool" / "refused.log"
    notes.parent.mkdir(mode=0o755)
    env.ctx = replace(env.ctx, refusals_path=notes)
    env.slurm.plugin_notes(notes)
    return env


class Clock:
    """Moves the controller's clock and the fake Slurm's together."""

    def __init__(self, env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
        self.env = env
        self.offset = dt.timedelta()
        real = observe.utcnow
        monkeypatch.setattr(observe, "utcnow", lambda: real() + self.offset)

    def advance(self, seconds: float) -> None:
        self.offset += dt.timedelta(seconds=seconds)
        self.env.slurm.advance(seconds)
