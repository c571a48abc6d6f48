"""get_backend(): the CLI backend unless pyslurm is asked for by name, never the tests' fake."""

from __future__ import annotations

import sys
import types

import pytest

from hivebatch.errors import HivebatchError
from hivebatch.slurm import get_backend
from hivebatch.slurm.cli import CliBackend, Completed
from hivebatch.slurm.pyslurm_backend import PyslurmBackend


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

        def send_signal(self, signal, steps="children"):
            actions.append(("send_signal", self.job_id, signal, steps))

    mod.Job = Job
    return mod, actions


def test_default_is_cli_even_when_pyslurm_imports(monkeypatch):
    # pyslurm is only picked by name: an installed one must not change how the controller reads Slurm
    mod, _ = _fake_pyslurm()
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    monkeypatch.delenv("HIVEBATCH_SLURM_BACKEND", raising=False)
    assert type(get_backend()) is CliBackend
    monkeypatch.setenv("HIVEBATCH_SLURM_BACKEND", "pyslurm")
    assert isinstance(get_backend(), PyslurmBackend)


def test_pyslurm_backend_reads_jobs_as_squeue_prints_them_and_acts_through_pyslurm(slurm_fixture):
    mod, actions = _fake_pyslurm()
    calls = []

    def runner(argv, stdin, env):
        calls.append(argv)
        name = "squeue_admin_comment.json" if argv[0] == "squeue" else "squeue_array_split.json"
        return Completed(0, slurm_fixture(name), "")

    be = PyslurmBackend(mod, runner)
    jobs = {j.job_id: j for j in be.list_jobs()}
    assert calls == [["squeue", "--json"]]
    # the trusted request the job_submit plugin wrote is read, as the CLI backend reads it
    assert any(j.admin_comment.startswith("hivebatch:") for j in jobs.values())
    be.release(7)
    be.requeue_hold(7)
    be.signal(7, "USR1", "steps")
    assert actions == [("release", 7), ("requeue", 7, True), ("send_signal", 7, "USR1", "children")]


def test_pyslurm_backend_names_an_array_task_by_its_index_through_the_cli(slurm_fixture):
    # Slurm reads a bare array job id as every task of the array (scancel_signal_array_task.txt)
    mod, actions = _fake_pyslurm()
    calls = []

    def runner(argv, stdin, env):
        calls.append(argv)
        return Completed(0, slurm_fixture("squeue_array_split.json") if argv[0] == "squeue" else "", "")

    be = PyslurmBackend(mod, runner)
    be.list_jobs()
    be.release(2334)
    be.signal(2329, "USR1", "batch")
    assert actions == []
    assert [c[-1] for c in calls[1:]] == ["2333_0", "2329_3"]
