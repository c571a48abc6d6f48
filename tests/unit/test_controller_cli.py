"""`hivebatch controller run`: one at a time, exit codes, logging, and the lock itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from controller_support import CONFIG

from hivebatch.cli.hivebatch.controller import controller
from hivebatch.controller import AlreadyRunning, ControllerLock
from hivebatch.db import migrate, open_database
from hivebatch.testing.fake_slurm import FakeSlurm


@pytest.fixture()
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda name=None: FakeSlurm())
    cfg = tmp_path / "hivebatch.yaml"
    cfg.write_text(CONFIG)
    return cfg


def _migrate(cfg: Path) -> None:
    import yaml

    engine, _ = open_database(cfg, yaml.safe_load(CONFIG))
    migrate.upgrade(engine)
    engine.dispose()


def test_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    first = ControllerLock(tmp_path / "l" / "ctl.lock")
    first.acquire()
    with pytest.raises(AlreadyRunning) as exc:
        ControllerLock(tmp_path / "l" / "ctl.lock").acquire()
    assert "another controller is running" in str(exc.value)
    first.release()
    with ControllerLock(tmp_path / "l" / "ctl.lock"):
        pass


def test_lock_dies_with_its_process(tmp_path: Path) -> None:
    lock = tmp_path / "ctl.lock"
    code = f"from hivebatch.controller import ControllerLock; import os; ControllerLock(__import__('pathlib').Path({str(lock)!r})).acquire(); os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True)
    with ControllerLock(lock):  # a killed holder leaves no stale lock
        pass


def test_run_once_on_an_empty_cluster(config: Path) -> None:
    _migrate(config)
    res = CliRunner().invoke(controller, ["run", "--once", "--config", str(config)])
    assert res.exit_code == 0, res.output
    assert "cycle done" in res.output


def test_second_controller_exits_zero_saying_so(config: Path) -> None:
    _migrate(config)
    with ControllerLock(config.parent / "var" / "ctl.lock"):
        res = CliRunner().invoke(controller, ["run", "--once", "--config", str(config)])
    assert res.exit_code == 0
    assert "another controller is running" in res.output
    assert "cycle done" not in res.output


def test_unmigrated_database_is_one_clear_error(config: Path) -> None:
    res = subprocess.run(
        [
            str(Path(sys.executable).parent / "hivebatch"),
            "controller",
            "run",
            "--once",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ},
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "error: the database schema is not up to date: run `hivebatch db upgrade` first"
    )


def test_interval_needs_loop(config: Path) -> None:
    res = CliRunner().invoke(controller, ["run", "--once", "--interval", "5", "--config", str(config)])
    assert res.exit_code != 0 and "--interval only makes sense with --loop" in res.output


def test_unreachable_slurm_is_exit_1_with_one_line(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hivebatch.cli.common import run_cli
    from hivebatch.slurm import SlurmError

    class Down:
        def list_jobs(self, job_ids=None):  # noqa: ANN001, ANN202
            raise SlurmError(["squeue"], 1, "slurm_load_jobs error: Unable to contact slurm controller")

    _migrate(config)
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda name=None: Down())
    with pytest.raises(SystemExit) as exc:
        run_cli(controller, ["run", "--once", "--config", str(config)])
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: squeue failed (exit 1): slurm_load_jobs error: Unable to contact slurm controller"]
