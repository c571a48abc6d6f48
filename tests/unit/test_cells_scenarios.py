"""Scenario files under tests/scenarios run end to end through ``hivebatch cells replay --json``.

Each NAME.yaml has NAME.expected.jsonl: the exact answers, checked by hand against design/cells.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
CASES = sorted(p for p in SCENARIOS.glob("*.yaml") if p.with_suffix(".expected.jsonl").exists())


def replay(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from hivebatch.cli.hivebatch.main import main; main()",
            "cells",
            "replay",
            str(path),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_there_are_scenarios() -> None:
    assert len(CASES) >= 6


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_scenario_matches_expected(path: Path) -> None:
    proc = replay(path, "--json")
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    want = [json.loads(line) for line in path.with_suffix(".expected.jsonl").read_text().splitlines()]
    assert got == want
    # one line per step, numbered from 0, in the exact key order of the contract
    for i, line in enumerate(proc.stdout.splitlines()):
        obj = json.loads(line)
        assert obj["step"] == i
        assert list(obj)[:2] == ["step", "op"]
        assert line.startswith('{"step":')


def test_infeasible_scenario_exits_2_with_one_line() -> None:
    proc = replay(SCENARIOS / "infeasible.yaml", "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert (
        "chain V100" in lines[0] and "level 2" in lines[0] and "need 3" in lines[0] and "only 2" in lines[0]
    )


def test_malformed_scenario_prints_nothing_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (SCENARIOS / "priority.yaml").read_text() + "  - shrink: {job: a0}\n"
    bad.write_text(text)
    proc = replay(bad, "--json")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "unknown step 'shrink'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_table_output_when_piped() -> None:
    proc = replay(SCENARIOS / "opportunistic.yaml")
    assert proc.returncode == 0
    assert "preempts o1" in proc.stdout
    assert "Virtual clusters after the last step" in proc.stdout
    assert "\x1b[" not in proc.stdout  # plain text when not a terminal


def test_map_shows_who_holds_each_gpu() -> None:
    proc = replay(SCENARIOS / "opportunistic.yaml", "--map")
    assert proc.returncode == 0, proc.stderr
    rows = {
        ln.split()[0]: ln.split()[1:]
        for ln in proc.stdout.splitlines()
        if ln.startswith(("a1 ", "a2 ", "a3 "))
    }
    assert rows["a1"] == ["g2", "x:-", "x:-", "x:-"]
    assert rows["a3"] == ["o4(opp)", "o5(opp)", "g1", "g1"]
