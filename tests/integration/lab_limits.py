"""The lab's job_submit plugin rendered with per-user limits, and the usage file it reads, for the tests that
need slurmctld to enforce ``user_limits:``."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.orm import Session

from hivebatch.controller.usage import usage_lua, write_usage
from hivebatch.db import Base, Job, make_engine
from hivebatch.jobsubmit import NODES_FILE, USAGE_FILE, job_submit_lua
from hivebatch.reports.source import ledger_strict_usage

PROJECT = Path(__file__).resolve().parents[2]


def _replace(path: Path, text: str) -> None:
    """Write the plugin with a later modification time than it had: slurmctld reloads it only then."""
    before = int(path.stat().st_mtime)
    write_usage(path, text)  # the same write-then-rename the usage file gets
    stamp = max(int(time.time()), before + 1)
    os.utime(path, (stamp, stamp))


@contextmanager
def limited_plugin(slurm_lab: Any, limits: dict[str, Any]) -> Iterator[Path]:
    """The lab's plugin rendered with ``limits`` (the usage file in slurm.conf's directory);
    the original plugin is put back and the usage file removed afterwards, whatever happened. The
    controller's node sizes file is set aside meanwhile: a copy of the VCs an earlier test's controller
    wrote there would bring that controller's limits (none) to the plugin."""
    etc = slurm_lab.conf.parent
    plugin = etc / "job_submit.lua"
    original = plugin.read_text()
    nodes, aside = etc / NODES_FILE, etc / f"{NODES_FILE}.aside"
    if nodes.exists():
        nodes.rename(aside)
    data = yaml.safe_load((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    data["user_limits"] = limits
    _replace(plugin, job_submit_lua(data, [slurm_lab.operator], etc))
    try:
        yield etc / USAGE_FILE
    finally:
        _replace(plugin, original)
        (etc / USAGE_FILE).unlink(missing_ok=True)
        if aside.exists():
            aside.rename(nodes)


def write_usage_from_a_ledger(path: Path, tmp_path: Path) -> None:
    """alice ran an urgent 8-GPU job for 6.5 hours yesterday: 52 GPU-hours, over her 48."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    end = now - dt.timedelta(days=1)
    engine = make_engine(f"sqlite:///{tmp_path / 'hb.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(
            Job(
                slurm_job_id=990001, user="alice", account="cv", vc_name="cv", qos="urgent", priority=2,
                foreign=False, request={"vc": "cv", "qos": "urgent", "gpus": 8}, gpus=8, state="done",
                submit_time=end - dt.timedelta(hours=7), start_time=end - dt.timedelta(hours=6.5),
                end_time=end, created_at=end, gpu_hours_guaranteed=52.0,
            )
        )  # fmt: skip
        session.commit()
        write_usage(path, usage_lua(ledger_strict_usage(session, now), now))
    engine.dispose()
