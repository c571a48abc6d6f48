"""The fault-injection suite: the controller against the real Slurm lab while things break.

Every test asserts 0 jobs lost, 0 placed twice, 0 GPUs bound twice (each running job's IDX from
Slurm against the others' and against the ledger). The figures are printed at the end of the run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from statistics import median

import pytest
from faultlab import FIGURES, FaultLab, write_config


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def faults(
    request: pytest.FixtureRequest,
    slurm_lab,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[FaultLab]:
    """The lab with no job of its users left, and a migrated ledger (SQLite unless the test asks for
    ``postgresql`` through indirect parametrization)."""
    monkeypatch.delenv("HIVEBATCH_DATABASE_URL", raising=False)
    monkeypatch.delenv("HIVEBATCH_CONFIG", raising=False)
    work = tmp_path / f"f{uuid.uuid4().hex[:6]}"
    work.mkdir()
    work.chmod(0o777)
    if getattr(request, "param", "sqlite") == "postgresql":
        url = request.getfixturevalue("pg_database")
    else:
        url = f"sqlite:///{work / 'hb.db'}"
    lab = FaultLab(slurm_lab, work, write_config(work, url), url)
    lab.ensure_slurmctld()
    lab.cancel_all()
    try:
        yield lab
    finally:
        lab.cancel_all()


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if not FIGURES:
        return
    w = terminalreporter.write_line
    w("fault suite figures (rounds · jobs · lost · placed twice · GPUs bound twice · notice s · recover s):")
    for name, f in FIGURES.items():
        notice = f"{median(f.notice_s):.1f}" if f.notice_s else "-"
        recover = f"{median(f.recover_s):.1f}" if f.recover_s else "-"
        w(
            f"  {name:28} {f.rounds:4} {f.jobs:4} {f.lost:3} {f.placed_twice:3} {f.bound_twice:3} {notice:>6} {recover:>6}"
        )
