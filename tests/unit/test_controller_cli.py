"""`hivebatch controller run`: one at a time, exit codes, logging, and the lock itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from controller_support import CONFIG

from hivebatch.cli.hivebatch.controller import controller
from hivebatch.controller import AlreadyRunning, ControllerLease, LeaseLost
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


def _engine(cfg: Path):  # noqa: ANN202
    import yaml

    engine, _ = open_database(cfg, yaml.safe_load(CONFIG))
    return engine


def test_lease_is_exclusive_and_given_back(config: Path) -> None:
    _migrate(config)
    engine = _engine(config)
    first = ControllerLease(engine)
    first.acquire()
    with pytest.raises(AlreadyRunning) as exc:
        ControllerLease(engine).acquire()
    assert "another controller holds this database (pid" in str(exc.value)
    first.release()
    with ControllerLease(engine):
        pass


def test_lease_of_a_killed_controller_is_taken_over(config: Path) -> None:
    _migrate(config)
    code = (
        "import os, yaml\nfrom hivebatch.controller import ControllerLease\n"
        "from hivebatch.db import open_database\n"
        f"engine, _ = open_database({str(config)!r}, yaml.safe_load(open({str(config)!r})))\n"
        "ControllerLease(engine).acquire()\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with ControllerLease(_engine(config)):  # its holder's pid is gone: no stale lock
        pass


def test_expired_lease_is_taken_over_and_the_old_holder_stops(config: Path) -> None:
    _migrate(config)
    engine = _engine(config)
    old = ControllerLease(engine, ttl_s=0)
    old.acquire()
    new = ControllerLease(engine)
    new.acquire()
    with pytest.raises(LeaseLost, match="taken over"):
        old.renew()
    new.renew()
    new.release()


def test_a_lock_file_held_by_anyone_does_not_stop_the_controller(config: Path) -> None:
    import fcntl

    _migrate(config)
    lock = config.parent / "var" / "ctl.lock"  # the config's lock_file: ignored now
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = CliRunner().invoke(controller, ["run", "--once", "--config", str(config)])
    assert res.exit_code == 0, res.output


def test_run_once_on_an_empty_cluster(config: Path) -> None:
    _migrate(config)
    res = CliRunner().invoke(controller, ["run", "--once", "--config", str(config)])
    assert res.exit_code == 0, res.output
    assert "cycle done" in res.output


def test_second_controller_exits_non_zero_saying_so(config: Path) -> None:
    _migrate(config)
    with ControllerLease(_engine(config)):
        res = CliRunner().invoke(controller, ["run", "--once", "--config", str(config)])
    assert res.exit_code == 1
    assert "another controller holds this database" in str(res.exception)
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
    assert err == [
        "error: Slurm is unavailable (squeue: slurm_load_jobs error: Unable to contact slurm controller); "
        "nothing changed"
    ]
