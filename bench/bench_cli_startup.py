"""Start-up time of ``hq`` and ``hsub --dry-run`` against ``squeue`` and ``sbatch --test-only`` on the lab.

Run on the running Slurm lab (``scripts/slurm-lab start``) as root:

    .venv/bin/python bench/bench_cli_startup.py [--runs N] [--config FILE]

Prints the median wall time of each command over N runs (interleaved, so load changes hit all alike)
and the ratios the issue asks for (target ≤ 1.5×). A bare ``python -c pass`` is measured too: it is
the floor any Python command pays before its first import.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def lab_env() -> dict[str, str]:
    out = subprocess.run(
        [str(PROJECT / "scripts" / "slurm-lab"), "env"], capture_output=True, text=True, check=True
    )
    env = dict(os.environ)
    for line in out.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export ") :].partition("=")
            env[key] = value.strip("'\"")
    return env


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.decode().strip()}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument(
        "--config", help="hivebatch config (default: the lab's quickstart config, else the example)"
    )
    ns = ap.parse_args()
    env = lab_env()
    config = ns.config or next(
        str(p)
        for p in (PROJECT / ".lab" / "hivebatch.yaml", PROJECT / "etc" / "hivebatch.example.yaml")
        if p.exists()
    )
    env["HIVEBATCH_CONFIG"] = config
    sbatch = shutil.which("sbatch", path=env.get("PATH"))
    squeue = shutil.which("squeue", path=env.get("PATH"))
    assert sbatch and squeue, "Slurm clients not found"
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.sh"
        script.write_text("#!/bin/bash\n#SBATCH -J bench\necho hello\n")
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "squeue": [squeue],
            "hq": [str(BIN / "hq")],
            "hq --json": [str(BIN / "hq"), "--json"],
            "sbatch --test-only": [sbatch, "--test-only", "-J", "bench", str(script)],
            "hsub --dry-run": [str(BIN / "hsub"), "--dry-run", "-A", "cv", "--gpus", "2", str(script)],
            "hsub --dry-run --model": [
                str(BIN / "hsub"),
                "--dry-run",
                "-A",
                "cv",
                "--gpus",
                "2",
                "--model",
                "resnet50",
                "--batch-size",
                "64",
                "--iters",
                "100",
                str(script),
            ],  # fmt: skip
        }
        for argv in commands.values():  # warm the page cache once
            timed(argv, env)
        samples: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(ns.runs):
            for name, argv in commands.items():
                samples[name].append(timed(argv, env))
    med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    print(f"CLI start-up on the lab, median of {ns.runs} runs (config {config})")
    for name, ms in med.items():
        print(f"  {name:<26} {ms:7.1f} ms")
    print("ratios (target ≤ 1.5×):")
    print(f"  hq / squeue                        {med['hq'] / med['squeue']:5.1f}×")
    print(f"  hsub --dry-run / sbatch --test-only {med['hsub --dry-run'] / med['sbatch --test-only']:5.1f}×")
    print(
        f"  python -c pass / squeue            {med['python -c pass'] / med['squeue']:5.1f}×  (the floor for any Python CLI)"
    )


if __name__ == "__main__":
    main()
