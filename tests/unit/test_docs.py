"""docs/: every link resolves, and every `$ ` command shown in the RUN pages' console blocks is run here
(in a copy of etc/, bench/, tests/fixtures/ and tests/scenarios/, with a scratch SQLite ledger), its exit
status matching whether the page shows an error and every output line the page shows found in its output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import console_commands, shape_pattern, shown_file, shows_error

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# pages whose console commands run offline; the others' run in the lab tests or are shown as examples
RUN = ("install-on-a-cluster.md", "controller-service.md", "upgrades.md", "config.md", "slurm-config.md",
       "cells.md", "qos.md", "backfill-fairshare.md", "preemption.md",
       "simulate.md", "controller.md", "hadmin.md")  # fmt: skip
# commands whose shown figures are timings: their lines are compared with the numbers left open
TIMED = ("python bench/bench_cells.py", "python bench/bench_controller.py")
BIN = Path(sys.executable).parent


def _with_exports(page: Path) -> list[tuple[str, str, list[str], dict[str, str]]]:
    """The page's commands, each with the variables its earlier ``export NAME=VALUE`` commands set, as the
    reader's shell keeps them."""
    out: list[tuple[str, str, list[str], dict[str, str]]] = []
    exported: dict[str, str] = {}
    for cmd, shown in console_commands(page):
        if cmd.startswith("export "):
            name, _, value = cmd.removeprefix("export ").partition("=")
            exported = {**exported, name: value}
            continue
        out.append((page.name, cmd, shown, exported))
    return out


CASES = [case for p in PAGES if p.name in RUN for case in _with_exports(p)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_the_run_pages_show_commands() -> None:
    assert {case[0] for case in CASES} == set(RUN)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "etc", where / "etc")
    shutil.copytree(ROOT / "tests" / "fixtures", where / "tests" / "fixtures")
    shutil.copytree(ROOT / "tests" / "scenarios", where / "tests" / "scenarios")
    shutil.copytree(ROOT / "bench", where / "bench")
    (where / "tests" / "unit").mkdir()
    shutil.copy(
        ROOT / "tests" / "unit" / "report_scenario.py", where / "tests" / "unit"
    )  # the hadmin page's ledger
    # the hadmin page's first command writes the ledger its others read; any of them may run first
    # when the tests are spread over workers, each with a sandbox of its own
    subprocess.run(
        [sys.executable, "tests/unit/report_scenario.py", "example"],
        cwd=where,
        check=True,
        capture_output=True,
    )
    # `cat FILE` of a file the sandbox lacks shows a file the page has the reader write
    for _, command, shown, _ in CASES:
        name = shown_file(command)
        if name and not (where / name).exists():
            (where / name).write_text("\n".join(shown) + "\n")
    return where


@pytest.mark.parametrize(
    ("page", "command", "shown", "exported"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_documented_command_runs_as_shown(
    page: str, command: str, shown: list[str], exported: dict[str, str], sandbox: Path
) -> None:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    for name in ("HIVEBATCH_DATABASE_URL", "HIVEBATCH_CONFIG", "HIVEBATCH_PROFILES", "HIVEBATCH_TRACE_DATA"):
        env.pop(name, None)
    env.update(exported)
    env["XDG_DATA_HOME"] = str(sandbox / "data")  # site profiles of the user running the tests stay out
    proc = subprocess.run(command, shell=True, cwd=sandbox, env=env, capture_output=True, text=True,  # noqa: S602 - the page's own command
                          timeout=300, check=False)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert (proc.returncode != 0) == shows_error(shown), output
    lines = output.splitlines()
    for line in shown:
        found = (
            any(shape_pattern(line).fullmatch(out.rstrip()) for out in lines)
            if command.startswith(TIMED)
            else line in output
        )
        assert found, f"{page} shows {line!r}; the command printed:\n{output}"
