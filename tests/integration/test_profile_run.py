"""``hadmin profile run`` on the real Slurm lab with a stand-in training script that prints its throughput."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

# step time 0.01 + 0.0005·batch seconds; fails (as if out of memory) above batch 64
STANDIN = """import argparse, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--batch-size", type=int, required=True)
ap.add_argument("--iterations", type=int, required=True)
a = ap.parse_args()
if a.batch_size > 64:
    print("CUDA out of memory", file=sys.stderr)
    sys.exit(3)
time.sleep(0.01 * a.iterations / 100)
print(f"iterations {a.iterations}")
print(f"{a.batch_size / (0.01 + 0.0005 * a.batch_size):.4f} samples/s")
"""


def _hadmin(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "from hivebatch.cli.hadmin.main import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def run_env(slurm_lab, tmp_path: Path) -> tuple[dict[str, str], Path, Path]:  # type: ignore[no-untyped-def]
    runs = slurm_lab.jobs_dir / f"profile-{uuid.uuid4().hex[:8]}"
    runs.mkdir(parents=True)
    store = tmp_path / "profiles.json"
    env = dict(
        os.environ,
        SLURM_CONF=str(slurm_lab.conf),
        HIVEBATCH_PROFILES=str(store),
        HIVEBATCH_SLURM_BACKEND="cli",
    )
    script = runs / "standin.py"
    script.write_text(STANDIN)
    return env, runs, store


def test_profile_run_measures_fits_and_stores(run_env, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    env, runs, store = run_env
    r = _hadmin(
        ["profile", "run", "--model", "standin", "--script", str(runs / "standin.py"), "--gpu-type", "V100",
         "--batch-sizes", "8,16,32,64,128", "--iters", "100", "--like", "resnet50", "--output-dir", str(runs),
         "--timeout", "120", "--json"],
        env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    lab_jobs.append(out["job_id"])
    assert out["samples"] == 4
    assert out["dropped"] == {"128": "exit 3: CUDA out of memory"}
    assert out["coefficients"]["t0"] == pytest.approx(0.01, rel=0.01)
    assert out["coefficients"]["t_w"] == pytest.approx(0.0005, rel=0.01)
    assert "communication terms from resnet50/V100" in out["source"]
    stored = json.loads(store.read_text())["profiles"]
    assert [(p["name"], p["gpu_type"], p["job_id"]) for p in stored] == [("standin", "V100", out["job_id"])]
    # the job really ran under Slurm, on one lab node with one GPU
    run_dir = next(p for p in runs.iterdir() if p.is_dir() and p.name.startswith("standin-"))
    assert (run_dir / f"slurm-{out['job_id']}.out").exists()
    acct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", str(out["job_id"]), "-o", "State,NodeList,AllocTRES"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    state, node, tres = acct.stdout.strip().splitlines()[0].split("|")
    assert state == "COMPLETED" and node.startswith("node") and "gres/gpu=1" in tres
    # the stored profile answers predictions
    pred = subprocess.run(
        [sys.executable, "-c", "from hivebatch.cli.hivebatch.main import main; main()", "model", "predict", "--name", "standin",
         "--batch", "32", "--iters", "100", "--overhead", "0", "--json"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert json.loads(pred.stdout)["latency_s"] == pytest.approx(100 * (0.01 + 0.0005 * 32), rel=0.01)


def test_profile_run_no_wait_then_collect(run_env, slurm_lab, lab_jobs) -> None:  # type: ignore[no-untyped-def]
    env, runs, store = run_env
    r = _hadmin(
        ["profile", "run", "--model", "later", "--script", str(runs / "standin.py"), "--gpu-type", "V100",
         "--batch-sizes", "16,32", "--output-dir", str(runs), "--no-wait", "--json"],
        env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    lab_jobs.append(out["job_id"])
    run_dir = Path(out["run_dir"])
    slurm_lab.wait_for_file(run_dir / "run-32.rc", "0", timeout_s=60)
    c = _hadmin(["profile", "collect", str(run_dir), "--json"], env)
    assert c.returncode == 0, c.stderr
    assert json.loads(c.stdout)["samples"] == 2
    assert [p["name"] for p in json.loads(store.read_text())["profiles"]] == ["later"]
