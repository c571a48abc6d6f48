"""Shared fixtures: the local Slurm lab, lab users, the fake Slurm backend and the test PostgreSQL.

Integration tests need ``scripts/slurm-lab start`` (``scripts/test`` starts it); when the lab is not
running, the ``slurm_lab`` fixture fails with the command to run instead of skipping silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hivebatch.slurm.cli import CliBackend
from hivebatch.slurm.types import SlurmJob
from hivebatch.testing.fake_slurm import FakeSlurm

PROJECT = Path(__file__).resolve().parent.parent
FIXTURES = PROJECT / "tests" / "fixtures"

#: Unix user -> Slurm account (VC), as scripts/slurm-lab creates them
LAB_USERS = {"alice": "cv", "bob": "nlp", "carol": "sys"}
LAB_OPERATOR = "hbctl"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # everything under tests/integration talks to the lab or PostgreSQL: mark it so `-m "not integration"` works
    for item in items:
        if "tests/integration/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _no_machine_config(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A test finds only the configs it names: the machine's own /etc/hivebatch/hivebatch.yaml (the
    quickstart links the lab's there) is not where the code under test may look by default."""
    import hivebatch.config

    gone = tmp_path_factory.getbasetemp() / "no-etc-hivebatch" / "hivebatch.yaml"
    monkeypatch.setattr(hivebatch.config, "SEARCH_PATH", (gone, *hivebatch.config.SEARCH_PATH[1:]))


@dataclass
class SlurmLab:
    """The running lab: where it keeps its files, and helpers to act as its users."""

    dir: Path
    conf: Path
    users: dict[str, str] = field(default_factory=lambda: dict(LAB_USERS))
    operator: str = LAB_OPERATOR

    @property
    def jobs_dir(self) -> Path:
        """World-writable directory for job scripts and output files."""
        return self.dir / "jobs"

    def backend(self, user: str | None = None) -> CliBackend:
        """The CLI backend acting as ``user`` (None: the test process itself, i.e. root)."""
        return CliBackend(run_as=user)

    def run(self, user: str | None, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command as a lab user (through runuser), with the lab's SLURM_CONF."""
        full = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        env = dict(os.environ, SLURM_CONF=str(self.conf))
        return subprocess.run(full, capture_output=True, text=True, env=env, check=check, timeout=60)

    def wait_for(
        self, job_id: int, states: Iterable[str], timeout_s: float = 30.0, held: bool | None = None
    ) -> SlurmJob:
        """Poll squeue until the job is in one of ``states`` (and held/not held); fail with its last state."""
        wanted = set(states)
        be = self.backend()
        deadline = time.monotonic() + timeout_s
        last: SlurmJob | None = None
        while time.monotonic() < deadline:
            jobs = be.list_jobs([job_id])
            if jobs:
                last = jobs[0]
                if last.state in wanted and (held is None or last.held == held):
                    return last
            time.sleep(0.3)
        where = f"{last.state} ({last.reason})" if last else "not in squeue"
        raise AssertionError(f"job {job_id} did not reach {sorted(wanted)} within {timeout_s:.0f} s: {where}")

    def wait_for_file(self, path: Path, text: str | None = None, timeout_s: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                content = path.read_text(errors="replace")
                if text is None or text in content:
                    return content
            time.sleep(0.3)
        raise AssertionError(
            f"{path} did not {'contain ' + repr(text) if text else 'appear'} within {timeout_s:.0f} s"
        )


def _lab_dir() -> Path:
    return Path(os.environ.get("HIVEBATCH_LAB_DIR") or PROJECT / ".lab")


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    lab_dir = _lab_dir()
    conf = Path(os.environ.get("SLURM_CONF") or lab_dir / "etc" / "slurm.conf")
    hint = "start it with: sudo scripts/slurm-lab start   (scripts/test does this for you)"
    if not conf.exists():
        pytest.fail(f"the Slurm lab is not set up ({conf} missing); {hint}", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("lab tests act as the lab users through runuser and must run as root", pytrace=False)
    if shutil.which("scontrol") is None:
        pytest.fail(f"scontrol not found; {hint}", pytrace=False)
    os.environ["SLURM_CONF"] = str(conf)
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False, timeout=30)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        pytest.fail(
            f"the Slurm lab is not running (scontrol ping: {ping.stdout.strip() or ping.stderr.strip()}); {hint}",
            pytrace=False,
        )
    yield SlurmLab(dir=lab_dir, conf=conf)


@pytest.fixture
def lab_jobs(slurm_lab: SlurmLab) -> Iterator[list[int]]:
    """Append the ids of jobs a test submits; they are cancelled after the test, whatever happened."""
    ids: list[int] = []
    yield ids
    for jid in ids:
        subprocess.run(["scancel", str(jid)], capture_output=True, check=False, timeout=30)


@pytest.fixture
def fake_slurm() -> FakeSlurm:
    """A fake cluster shaped like the lab: node1..node4 × 8 GPUs, lab users in their accounts, Operator hbctl."""
    return FakeSlurm(
        accounts={u: [a] for u, a in LAB_USERS.items()},
        operators=[LAB_OPERATOR],
    )


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of the test PostgreSQL that scripts/test starts (HIVEBATCH_TEST_PG_URL)."""
    url = os.environ.get("HIVEBATCH_TEST_PG_URL")
    if not url:
        pytest.fail(
            "HIVEBATCH_TEST_PG_URL is not set: run the tests through scripts/test, which starts PostgreSQL",
            pytrace=False,
        )
    return url


@pytest.fixture
def pg_database(pg_url: str) -> Iterator[str]:
    """The URL of a brand-new empty database on the test PostgreSQL, dropped afterwards."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from hivebatch.db import make_engine

    base = make_url(pg_url).set(drivername="postgresql+psycopg")
    name = f"hbtest_{uuid.uuid4().hex[:10]}"
    admin = make_engine(base.render_as_string(hide_password=False)).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def slurm_fixture() -> Callable[[str], str]:
    """Read a recorded Slurm output from tests/fixtures/slurm/."""

    def read(name: str) -> str:
        return (FIXTURES / "slurm" / name).read_text(encoding="utf-8")

    return read
