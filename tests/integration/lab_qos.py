"""The opportunistic QOS's GraceTime set for one test on the running lab, and put back after it.

hadmin slurm-config sets it to the config's notice (120 s by default on the lab): Slurm gives a job it
preempts that long before it requeues it (tests/fixtures/slurm/preempt_grace.txt).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def opportunistic_grace(seconds: int) -> Iterator[int]:
    was = subprocess.run(["sacctmgr", "-n", "-P", "show", "qos", "opportunistic", "format=GraceTime"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    _set(seconds)
    try:
        yield seconds
    finally:
        # sacctmgr shows [D-]HH:MM:SS and takes seconds
        _set(sum(int(p) * 60**i for i, p in enumerate(reversed(was.split(":")))) if was else 120)


def _set(seconds: int) -> None:
    subprocess.run(["sacctmgr", "-i", "modify", "qos", "where", "name=opportunistic", "set", f"GraceTime={seconds}"],
                   capture_output=True, check=True)  # fmt: skip
