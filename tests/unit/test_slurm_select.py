"""get_backend(): CLI by default, pyslurm when it imports, never the tests' fake."""

from __future__ import annotations

import sys
import types

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.slurm import get_backend
from hivebatch.slurm.cli import CliBackend
from hivebatch.slurm.pyslurm_backend import PyslurmBackend, job_from_pyslurm, node_from_pyslurm


@pytest.fixture
def no_pyslurm(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes `import pyslurm` raise ImportError
    monkeypatch.delenv("HIVEBATCH_SLURM_BACKEND", raising=False)


def test_default_is_cli_without_pyslurm(no_pyslurm):
    assert isinstance(get_backend(), CliBackend) and get_backend().name == "cli"


def test_fake_cannot_be_selected(no_pyslurm, monkeypatch):
    monkeypatch.setenv("HIVEBATCH_SLURM_BACKEND", "fake")
    with pytest.raises(HivebatchError, match="not a Slurm backend: use one of cli, pyslurm"):
        get_backend()
    with pytest.raises(HivebatchError, match="not a Slurm backend"):
        get_backend("fake")


def test_unknown_backend_is_one_clear_error(no_pyslurm, monkeypatch):
    monkeypatch.setenv("HIVEBATCH_SLURM_BACKEND", "slurmrestd")
    with pytest.raises(HivebatchError, match="not a Slurm backend"):
        get_backend()


def test_asking_for_pyslurm_without_it_says_so(no_pyslurm):
    with pytest.raises(HivebatchError, match="pyslurm cannot be imported"):
        get_backend("pyslurm")


def _fake_pyslurm():
    mod = types.ModuleType("pyslurm")
    actions = []

    class Job:
        def __init__(self, job_id):
            self.job_id = job_id

        def release(self):
            actions.append(("release", self.job_id))

        def requeue(self, hold=False):
            actions.append(("requeue", self.job_id, hold))

    job = types.SimpleNamespace(
        id=7,
        name="j",
        user_name="alice",
        account="cv",
        qos="normal",
        state="RUNNING",
        state_reason="None",
        nodes="node[1-2]",
        comment="c",
        submit_time=100,
        start_time=101,
        end_time=0,
        time_limit=5,
        num_nodes=2,
        exit_code=0,
        priority=1,
        partition="gpu",
        required_nodes="",
        get_resource_layout_per_node=lambda: {
            "node1": {"gres": {"gpu:g3": {"count": 1, "indexes": "3"}}},
            "node2": {"gres": {"gpu:g3": {"count": 1, "indexes": "3"}}},
        },
    )
    node = types.SimpleNamespace(
        name="node1",
        state="IDLE+DRAIN",
        configured_gres={"gpu:g0": 1, "gpu:g1": 1},
        allocated_gres={"gpu:g1": 1},
        reason="x",
    )
    mod.Job = Job
    mod.Jobs = types.SimpleNamespace(load=lambda: {7: job})
    mod.Nodes = types.SimpleNamespace(load=lambda: {"node1": node})
    return mod, actions


def test_pyslurm_selected_when_it_imports(monkeypatch):
    mod, actions = _fake_pyslurm()
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    monkeypatch.delenv("HIVEBATCH_SLURM_BACKEND", raising=False)
    be = get_backend()
    assert isinstance(be, PyslurmBackend)
    be.release(7)
    be.requeue_hold(7)
    assert actions == [("release", 7), ("requeue", 7, True)]
    (job,) = be.list_jobs([7])
    assert (
        job.gpus == {"node1": [3], "node2": [3]}
        and job.time_limit_s == 300
        and job.nodes == ["node1", "node2"]
    )
    (node,) = be.list_nodes()
    assert node.bad and node.gpu_indices == [0, 1] and node.gpus_used == [1]


def test_pyslurm_mappers_tolerate_missing_attributes():
    job = job_from_pyslurm(types.SimpleNamespace(id=1, state="PENDING", state_reason="JobHeldUser"))
    assert job.held and job.nodes == [] and job.gpus == {}
    assert not node_from_pyslurm(types.SimpleNamespace(name="n", state="IDLE")).bad


def test_pyslurm_job_carries_its_deadline_and_time_min():
    # pyslurm's Job names them deadline (epoch seconds) and time_limit_min (minutes); the controller
    # releases a waiting job past its deadline by them, as it does from squeue's fields
    job = job_from_pyslurm(
        types.SimpleNamespace(
            id=2,
            state="PENDING",
            state_reason="JobHeldUser",
            time_limit=10,
            time_limit_min=3,
            deadline=1_800_000_000,
        )
    )
    assert job.time_limit_s == 600 and job.time_min_s == 180
    assert job.deadline is not None and job.deadline.timestamp() == 1_800_000_000
    plain = job_from_pyslurm(types.SimpleNamespace(id=3, state="PENDING", deadline=None, time_limit_min=None))
    assert plain.deadline is None and plain.time_min_s is None
