"""Which way the imports go: the CLI sits on top; nothing below imports it; reports read the stored state
through hivebatch.state, never through the controller."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hivebatch"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        bad = sorted(n for n in _imports(path) if n.startswith(forbidden))
        if bad:
            out.append(f"{path.relative_to(PACKAGE.parent)}: {', '.join(bad)}")
    return out


def test_nothing_below_the_cli_imports_it() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "cli") in path.parents:
            continue
        if any(n == "hivebatch.cli" or n.startswith("hivebatch.cli.") for n in _imports(path)):
            offenders.append(str(path.relative_to(PACKAGE.parent)))
    assert offenders == []


def test_reports_read_state_through_the_library_layer() -> None:
    assert _offenders("reports", ("hivebatch.controller", "hivebatch.cli")) == []


def test_the_library_layer_stands_below_controller_and_cli() -> None:
    assert _offenders("state", ("hivebatch.controller", "hivebatch.cli", "hivebatch.reports")) == []


def test_submit_does_not_reach_into_the_cli() -> None:
    assert _offenders("submit", ("hivebatch.cli",)) == []
