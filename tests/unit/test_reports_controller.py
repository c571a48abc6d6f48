"""Reports on a ledger written by the real controller (fake Slurm, fake clock), figures by hand.

08:00  alice cv 8 GPUs (normal), bob nlp 16 GPUs (prior), carol sys 8 GPUs (opportunistic) all start.
09:00  carol submits 2 guaranteed GPUs in sys: the controller preempts her opportunistic job for them;
       alice's job ends.
09:30  the opportunistic job is placed again (on alice's freed node) and restarts.
10:00  bob's and carol's guaranteed jobs end. The report window is 08:00–10:00.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from controller_support import Env, make_env
from report_scenario import config_data
from sqlalchemy import select

from hivebatch.db import Job
from hivebatch.reports.gpumap import build_cluster_map
from hivebatch.reports.source import load_jobs, load_slots
from hivebatch.reports.topology import node_layouts, vc_infos
from hivebatch.reports.usage import quota_report
from hivebatch.reports.users import users_report

T0 = dt.datetime(2026, 11, 16, 8, 0, tzinfo=dt.UTC)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    env = make_env(tmp_path, clock=lambda: T0)
    # The controller stamps its decisions with the wall clock; tie it to the fake Slurm's clock.
    monkeypatch.setattr("hivebatch.controller.observe.utcnow", lambda: env.slurm.now().replace(tzinfo=None))
    a = env.submit("alice", "cv", 8, time_limit_s=4 * 3600)
    b = env.submit("bob", "nlp", 16, qos="prior")
    env.submit("carol", "sys", 8, qos="opportunistic")
    env.cycle()
    env.cycle()
    env.slurm.advance(3600)
    g = env.submit("carol", "sys", 2)
    env.cycle()
    env.slurm.finish(a)
    env.cycle()
    env.slurm.advance(1800)
    env.cycle()
    env.cycle()
    env.slurm.advance(1800)
    env.slurm.finish(b)
    env.slurm.finish(g)
    env.cycle()
    return env


def test_quota_on_a_controller_ledger(env: Env) -> None:
    with env.factory() as session:
        jobs, segments = load_jobs(session)
        ects = {
            str(j.slurm_job_id): (j.end_time, j.expected_completion) for j in session.scalars(select(Job))
        }
    rep = quota_report(jobs, segments, vc_infos(config_data()), T0, T0 + dt.timedelta(hours=2), total_gpus=32)
    vcs = {v.name: v for v in rep.vcs}
    assert vcs["cv"].gpu_hours_guaranteed == pytest.approx(8)  # 8 GPUs 08:00–09:00
    assert vcs["cv"].reservation_share == pytest.approx(8 / 24)
    assert vcs["nlp"].gpu_hours_guaranteed == pytest.approx(32)  # 16 GPUs 08:00–10:00
    assert vcs["nlp"].verdict == "full"
    assert vcs["sys"].gpu_hours_guaranteed == pytest.approx(2)  # 2 GPUs 09:00–10:00
    # carol's opportunistic job: 8 GPUs 08:00–09:00 (lost to preemption), again from 09:30
    assert vcs["sys"].gpu_hours_opportunistic == pytest.approx(8 + 4)
    assert (vcs["sys"].preemptions, vcs["sys"].preempted_gpu_hours) == (1, pytest.approx(8))
    t = rep.totals
    assert t.utilization == pytest.approx((42 + 12) / 64)
    assert t.gpus_lent_now == 8
    assert (t.jobs_run, t.jobs_pending) == (4, 0)
    assert all(v.mean_queue_s == 0 for v in rep.vcs)  # everything was placed in the cycle it arrived
    # every guaranteed job finished inside the window, so each counts, judged by the ECT the controller set
    met = sum(1 for end, ect in (ects["1"], ects["2"], ects["4"]) if end <= ect)
    assert (t.qos_overall.met, t.qos_overall.total) == (met, 3)


def test_users_and_map_on_a_controller_ledger(env: Env) -> None:
    with env.factory() as session:
        jobs, segments = load_jobs(session)
        slots, taken = load_slots(session)
    users = {u.user: u for u in users_report(jobs, segments, T0, T0 + dt.timedelta(hours=2), {"V100": 8})}
    assert users["carol"].gpu_hours == pytest.approx(14) and users["carol"].preemptions == 1
    assert users["bob"].gpu_hours == pytest.approx(32)
    assert taken == T0 + dt.timedelta(hours=2)
    cmap = build_cluster_map(node_layouts(config_data()), slots)
    # at 10:00 only the restarted opportunistic job runs: 8 GPUs on one node
    assert cmap.counts()["opportunistic"] == 8 and cmap.counts()["guaranteed"] == 0
    assert cmap.fragmentation().free_nodes == 3
