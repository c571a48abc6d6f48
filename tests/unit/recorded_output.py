"""Recorded Slurm outputs (tests/fixtures/slurm/) whose ``#`` lines say how they were recorded."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def recorded_output(name: str) -> str:
    """What the command printed, without the lines saying how it was recorded."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("#"))
