"""hq end to end on a fake Slurm and a real SQLite ledger written with the DB models."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_child import python_code

from hivebatch.state.ledger import read_ledger

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "hivebatch.yaml"
    text = (PROJECT / "etc" / "hivebatch.example.yaml").read_text()
    cfg.write_text(text.replace("sqlite:///var/hivebatch.db", "sqlite:///ledger.db"))
    return cfg


def write_ledger(db: Path) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from hivebatch.cells import CellAllocator, parse_cluster_config
    from hivebatch.cells.types import Request
    from hivebatch.config import load_config
    from hivebatch.db.models import Base, CellSnapshot, Job

    engine = create_engine(f"sqlite:///{db}")
    Base.metadata.create_all(engine)
    _path, data = load_config(PROJECT / "etc" / "hivebatch.example.yaml")
    alloc = CellAllocator(parse_cluster_config(data))
    placed = alloc.allocate(
        Request(job_id="101", vc="cv", gpus=2, nodes=None, gpu_type=None, within=None, priority=0)
    )
    t = dt.datetime(2026, 1, 1, 12, 0)
    with Session(engine) as s:
        s.add(Job(slurm_job_id=101, name="train", user="alice", account="cv", vc_name="cv", qos="prior", gpus=2,
                  state="running", placement=placed.placement, predicted_end=t + dt.timedelta(hours=1),
                  expected_completion=t + dt.timedelta(hours=2), start_time=t, submit_time=t))  # fmt: skip
        s.add(Job(slurm_job_id=102, name="wait", user="bob", account="nlp", vc_name="nlp", qos="normal", gpus=16,
                  state="queued", reason="VC nlp has no free V100-NODE cell", submit_time=t,
                  request={"vc": "nlp", "gpus": 16, "qos": "normal"}))  # fmt: skip
        s.add(Job(slurm_job_id=99, name="old", user="alice", vc_name="cv", qos="normal", gpus=1, state="done",
                  placement={"node4": [7]}, end_time=t))  # fmt: skip
        s.add(CellSnapshot(id=1, taken_at=t, data=alloc.snapshot()))
        s.commit()
    engine.dispose()


def hq(config: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {"HIVEBATCH_CONFIG": str(config), "PATH": "/usr/bin:/bin", **(env_extra or {})}
    code = python_code("from hivebatch.cli.hq.main import main\nmain()\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)  # fmt: skip


def test_the_sqlite_reader_reads_the_models_schema(config: Path) -> None:
    write_ledger(config.parent / "ledger.db")
    from hivebatch.config import load_config

    path, data = load_config(config)
    ledger = read_ledger(path, data, want_cells=True)
    assert ledger.available and ledger.snapshot is not None
    assert ledger.snapshot_time == dt.datetime(2026, 1, 1, 12, 0)
    jobs = {j.slurm_job_id: j for j in ledger.jobs}
    assert set(jobs) == {101, 102}  # finished jobs only on request
    assert jobs[101].predicted_end == dt.datetime(2026, 1, 1, 13, 0)
    assert len(next(iter(jobs[101].placement.values()))) == 2
    assert jobs[102].request == {"vc": "nlp", "gpus": 16, "qos": "normal"} and jobs[102].foreign is False
    everything = read_ledger(path, data, include_final=True)
    assert {j.slurm_job_id for j in everything.jobs} == {99, 101, 102}


def test_hq_tells_when_the_controller_has_stopped_running(config: Path) -> None:
    # seen on the lab: with the controller stopped, hq went on saying a new GPU job waits "for the
    # hivebatch controller to look at it", and nothing said the controller was not running
    from hivebatch.cli.hq.main import stale_controller
    from hivebatch.config import load_config

    write_ledger(config.parent / "ledger.db")
    path, data = load_config(config)
    last = read_ledger(path, data).snapshot_time  # the last cycle's time, read without the cells
    assert last == dt.datetime(2026, 1, 1, 12, 0)
    interval = float(data["controller"]["interval_s"])
    assert stale_controller(data, last, last + dt.timedelta(seconds=max(3 * interval, 180))) is None
    late = stale_controller(data, last, last + dt.timedelta(minutes=14))
    assert late == (
        f"the hivebatch controller last ran 14 min ago (every {interval:.0f} s is configured): "
        "GPU jobs wait until it runs again; tell your admin"
    )
    assert "26.0 h ago" in (stale_controller(data, last, last + dt.timedelta(hours=26)) or "")
    assert stale_controller(data, None, last) is None  # never ran: hq says so in its own words


def test_hq_json_from_the_ledger_when_slurm_forgot_the_jobs(config: Path) -> None:
    write_ledger(config.parent / "ledger.db")
    proc = hq(config, "--json", "-t", "all")
    assert proc.returncode == 0, proc.stderr
    rows = {r["job_id"]: r for r in json.loads(proc.stdout)}
    assert rows[101]["state"] == "RUNNING" and rows[101]["vc"] == "cv" and rows[101]["qos"] == "prior"
    assert rows[101]["slack_s"] == 3600.0
    assert rows[102]["reason"] == "VC nlp has no free V100-NODE cell"
    assert rows[99]["state"] == "COMPLETED" and rows[99]["placement"] == {"node4": [7]}


def test_hq_plain_columns_when_piped(config: Path) -> None:
    write_ledger(config.parent / "ledger.db")
    proc = hq(config, "-A", "nlp")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()
    assert header.split()[:6] == ["JOBID", "USER", "VC", "CLASS", "NAME", "ST"]
    assert row.split()[:6] == ["102", "bob", "nlp", "normal", "wait", "PD"]
    assert row.endswith("VC nlp has no free V100-NODE cell")
    assert hq(config, "-h", "-A", "nlp").stdout.split()[:2] == ["102", "bob"]


def test_hq_vc_from_the_snapshot(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import hivebatch.slurm
    from hivebatch.cli.hq import main as hq_cli

    write_ledger(config.parent / "ledger.db")
    running = SimpleNamespace(job_id=101, state="RUNNING")
    backend = SimpleNamespace(list_jobs=lambda ids=None: [running], list_nodes=lambda: [])
    monkeypatch.setattr(hivebatch.slurm, "get_backend", lambda *a, **k: backend)
    assert hq_cli.run(["vc", "cv", "--json", "--config", str(config)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gpus_total"] == 12 and report["gpus_used"] == 2
    assert [j["job_id"] for j in report["jobs"]] == ["101"]
    # a job the snapshot holds but Slurm no longer runs ended since: its cells are free again
    backend.list_jobs = lambda ids=None: []
    assert hq_cli.run(["vc", "cv", "--json", "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out)["gpus_used"] == 0
    plain = hq(config, "vc")
    assert "VC cv: 12 GPUs, 0 in use" in plain.stdout and "VC sys: 4 GPUs" in plain.stdout
    assert "CELL TYPE" in plain.stdout and "cells as of the controller's last cycle" in plain.stdout


def test_hq_without_a_ledger_or_with_bad_options(config: Path) -> None:
    proc = hq(config, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    # squeue's own judgement of an option (a job id) needs a Slurm: tests/integration/test_hsub_hq.py
    for args, message in [(["-t", "SLEEPING"], "unknown state"), (["--bogus"], "unrecognized option '--bogus'"),
                          (["vc", "nosuch"], "unknown virtual cluster")]:  # fmt: skip
        proc = hq(config, *args)
        assert proc.returncode == 1 and proc.stderr.startswith("hq: error:") and message in proc.stderr, (
            proc.stderr
        )
        assert proc.stderr.count("\n") == 1
    # squeue: "error: --iterate=abc"; hq ended in a ValueError traceback
    for value in ("abc", "0", "-5"):
        proc = hq(config, "-i", value)
        assert proc.returncode == 1 and proc.stderr == (
            f"hq: error: --iterate={value}: give the seconds between listings, a whole number above 0\n"
        )
    # squeue names its variable's bad state as its own; hq named -t, which was never typed
    proc = hq(config, env_extra={"SQUEUE_STATES": "SLEEPING"})
    assert proc.returncode == 1 and proc.stderr == (
        "hq: error: SQUEUE_STATES: unknown state 'SLEEPING' (e.g. PENDING, RUNNING, PD, R, all)\n"
    )
    assert hq(config, "-t", "PD", env_extra={"SQUEUE_STATES": "SLEEPING"}).returncode == 0
    assert "-t/--states: unknown state 'X'" in hq(config, "-t", "X", env_extra={"SQUEUE_STATES": "PD"}).stderr


def test_hq_on_a_sqlite_ledger_imports_nothing_heavy(config: Path) -> None:
    write_ledger(config.parent / "ledger.db")
    code = python_code(
        "import sys\nfrom hivebatch.cli.hq import main as hq\n"
        "hq.run(['--json'])\n"
        "print('HEAVY', sorted(m for m in ('sqlalchemy', 'numpy', 'rich', 'click', 'jinja2') if m in sys.modules))\n"
    )
    env = {"HIVEBATCH_CONFIG": str(config), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "HEAVY []"


def test_finished_jobs_named_by_id_come_from_the_ledger_when_slurm_forgot_them(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # seen on the lab: hq --finished -j 2025 printed no job, as squeue lists a finished job only with
    # -t, and refuses the id of one it has forgotten ("slurm_load_jobs error: Invalid job id specified")
    import hivebatch.cli.hq.squeue as hq_squeue
    import hivebatch.slurm
    from hivebatch.cli.hq import main as hq_cli
    from hivebatch.errors import HivebatchError

    write_ledger(config.parent / "ledger.db")
    asked: list[list[str]] = []

    def squeue(args: list[str]) -> str:
        asked.append(list(args))
        if "99" in args:
            raise HivebatchError("slurm_load_jobs error: Invalid job id specified")
        return ""

    monkeypatch.setattr(hq_squeue, "run_squeue", squeue)
    backend = SimpleNamespace(list_jobs=lambda ids=None: [], list_nodes=lambda: [])
    monkeypatch.setattr(hivebatch.slurm, "get_backend", lambda *a, **k: backend)
    assert hq_cli.run(["--finished", "-j", "99", "--json", "--config", str(config)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["job_id"], row["state"]) == (99, "COMPLETED")
    assert asked == [["-j", "99", "-t", "all", "-h", "-o", "%A"]]
    # a selection squeue makes (-n) asks it for the finished jobs it still lists too
    assert hq_cli.run(["--finished", "-n", "old", "--json", "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out) == [] and asked[-1][:4] == ["-n", "old", "-t", "all"]
    # without --finished, squeue's own refusal stands
    with pytest.raises(HivebatchError, match="Invalid job id"):
        hq_cli.run(["-j", "99", "--config", str(config)])
