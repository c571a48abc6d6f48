"""A partition made on the running lab for one test, and removed after it (its jobs cancelled first)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def lab_partition(name: str, *settings: str) -> Iterator[str]:
    """``scontrol create PartitionName=name settings...``; yields the name."""
    made = subprocess.run(
        ["scontrol", "create", f"PartitionName={name}", *settings, "State=UP"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert made.returncode == 0, made.stderr
    try:
        yield name
    finally:
        # Slurm keeps a partition that still holds jobs
        subprocess.run(["scancel", "-p", name], capture_output=True, timeout=30)
        deadline = time.monotonic() + 30
        while subprocess.run(
            ["scontrol", "delete", f"PartitionName={name}"], capture_output=True, timeout=30
        ).returncode:
            assert time.monotonic() < deadline, f"partition {name} could not be deleted"
            time.sleep(0.5)
