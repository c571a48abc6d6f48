"""``hivebatch cells check``: validation report and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def hivebatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from hivebatch.cli.hivebatch.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_example_config() -> None:
    proc = hivebatch("cells", "check", str(ROOT / "etc" / "hivebatch.example.yaml"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for vc in ("cv", "nlp", "sys"):
        assert f"\n{vc} " in out
    assert "V100-NODE > V100-SOCKET > V100-SWITCH > V100" in out
    assert "ok: 4 nodes, 32 GPUs" in out
    # the capacity table: level 4 has 4 node cells, the VCs need 3
    cap = out[out.index("Capacity per level") :].splitlines()
    row = next(ln.split() for ln in cap if ln.split()[:3] == ["V100", "4", "V100-NODE"])
    assert row[3:7] == ["8", "4", "3", "1"]


def test_check_bad_config_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "cluster:\n  cell_types:\n    N: {child: G, count: 2, node: true}\n"
        "  physical_cells:\n    - {type: N, nodes: [a]}\nvirtual_clusters:\n  v: {cells: {N: 2}}\n"
    )
    proc = hivebatch("cells", "check", str(cfg))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "need 2" in proc.stderr and "only 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_missing_file(tmp_path: Path) -> None:
    proc = hivebatch("cells", "check", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1 and "cannot read" in proc.stderr


def test_cell_core_is_pure() -> None:
    # the core must run inside the simulator and tests without Slurm, a database or a terminal
    import ast

    forbidden = {
        "subprocess",
        "click",
        "rich",
        "sqlalchemy",
        "hivebatch.db",
        "hivebatch.slurm",
        "os",
        "socket",
    }
    for path in (ROOT / "hivebatch" / "cells").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in forbidden), (
                    f"{path.name} imports {name}"
                )
