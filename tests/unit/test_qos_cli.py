"""``hivebatch model fit|predict|list`` through click, with a private profile store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from qos_helpers import PROFILE_DATA, simple_profile

from hivebatch.cli.hivebatch.main import cli
from hivebatch.qos import Shape
from hivebatch.qos.perfmodel import step_time


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "profiles.json"
    monkeypatch.setenv("HIVEBATCH_PROFILES", str(store))
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(tmp_path / "absent.yaml"))
    return store


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args))


def synthetic_csv(path: Path) -> None:
    truth = simple_profile(t0=0.05, t_w=0.002, s_multi=0.02, s_lognode=0.05)
    rng = np.random.default_rng(0)
    lines = ["local_bsz,step_time,sync_time,placement"]
    for digits in ("1", "2", "4", "8", "11", "22", "44", "88", "12"):
        s = Shape(len(digits), int(digits[0]))
        for w in (8, 16, 32, 64, 128):
            t = step_time(truth, w * s.gpus, s) * (1 + rng.normal(0, 0.01))
            lines.append(f"{w},{t},0.0,{digits}")
    path.write_text("\n".join(lines) + "\n")


def test_fit_json_keys_and_store(env: Path, tmp_path: Path) -> None:
    csv = tmp_path / "placements-dgx.csv"
    synthetic_csv(csv)
    r = invoke("model", "fit", str(csv), "--name", "toy", "--holdout", "0.3", "--seed", "1", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("name", "form", "samples", "coefficients", "mape_train", "mape_holdout"):
        assert key in out
    assert out["name"] == "toy" and out["gpu_type"] == "V100" and out["form"] == "default"
    assert out["samples"] == 40 and out["skipped_asymmetric"] == 5
    assert out["coefficients"]["t_w"] == pytest.approx(0.002, rel=0.1)
    assert out["mape_holdout"] < 3
    assert set(out["mape_holdout_by_form"]) == {"default", "paper"}
    stored = json.loads(env.read_text())["profiles"]
    assert [(p["name"], p["gpu_type"]) for p in stored] == [("toy", "V100")]


def test_fit_text_shows_both_forms(env: Path, tmp_path: Path) -> None:
    csv = tmp_path / "placements-rtx.csv"
    synthetic_csv(csv)
    r = invoke("model", "fit", str(csv), "--name", "toy", "--holdout", "0.3", "--form", "paper")
    assert r.exit_code == 0, r.output
    assert "fitted toy on RTX2080Ti (form paper) from 40 samples; skipped 5 asymmetric" in r.output
    assert "holdout MAPE (12 held-out rows, seed 0): default " in r.output and " paper " in r.output


def test_fit_errors(env: Path, tmp_path: Path) -> None:
    csv = tmp_path / "measurements.csv"
    synthetic_csv(csv)
    r = invoke("model", "fit", str(csv), "--name", "toy")
    assert r.exit_code != 0 and "--gpu-type is required" in r.output
    r = invoke("model", "fit", str(csv), "--name", "toy", "--gpu-type", "V100", "--holdout", "2")
    assert r.exit_code != 0 and "--holdout must be between 0 and 1" in r.output
    assert not env.exists()


def test_bad_csv_is_one_line_exit_1(env: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "placements-dgx.csv"
    bad.write_text("hello,world\n1,2\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hivebatch.cli.hivebatch.main import main; main()",
            "model",
            "fit",
            str(bad),
            "--name",
            "x",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: placements-dgx.csv: not a profile CSV")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_predict_json_keys(env: Path) -> None:
    r = invoke("model", "predict", "--name", "resnet50", "--gpu-type", "V100", "--batch", "256", "--nodes", "2",
               "--gpus-per-node", "4", "--iters", "1000", "--overhead", "30", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["throughput"] > 0
    assert out["latency_s"] == pytest.approx(256 * 1000 / out["throughput"] + 30)
    assert out["local_batch"] == 32 and out["note"] is None
    r = invoke("model", "predict", "--name", "resnet50", "--gpu-type", "V100", "--batch", "256", "--json")
    assert json.loads(r.output)["latency_s"] is None


def test_predict_fallback_note_and_range_error(env: Path) -> None:
    r = invoke(
        "model", "predict", "--name", "myresnet", "--like", "resnet50", "--gpu-type", "K80", "--batch", "64"
    )
    assert r.exit_code == 0
    assert "note: no profile for myresnet on K80; using resnet50/K80 (--like)" in r.output
    r = invoke(
        "model", "predict", "--name", "resnet50", "--batch", "4", "--nodes", "2", "--gpus-per-node", "4"
    )
    assert r.exit_code != 0 and "local batch of 0.5" in str(r.exception)


def test_list_shows_shipped_and_local(env: Path, tmp_path: Path) -> None:
    csv = tmp_path / "placements-dgx.csv"
    synthetic_csv(csv)
    assert invoke("model", "fit", str(csv), "--name", "toy").exit_code == 0
    r = invoke("model", "list")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].split()[:3] == ["MODEL", "GPU", "FORM"]
    assert any(line.split()[:2] == ["toy", "V100"] and "local" in line for line in lines)
    assert any(line.split()[:2] == ["seq2seq", "K80"] and "shipped" in line for line in lines)
    data = json.loads(invoke("model", "list", "--json").output)
    assert {"toy", "resnet50", "bert"} <= {p["name"] for p in data}


@pytest.mark.skipif(
    not (PROFILE_DATA / "imagenet" / "placements-dgx.csv").exists(), reason="profile measurements absent"
)
def test_fit_real_file_reports_both_forms(env: Path) -> None:
    d = PROFILE_DATA / "imagenet"
    r = invoke("model", "fit", str(d / "placements-dgx.csv"), str(d / "scalability-dgx.csv"), "--name", "resnet50",
               "--holdout", "0.3", "--json")  # fmt: skip
    out = json.loads(r.output)
    assert out["mape_holdout"] <= 10
    assert out["mape_holdout_by_form"]["paper"] > out["mape_holdout_by_form"]["default"]
    assert out["skipped_asymmetric"] > 0


def test_predict_checks_the_configured_cluster(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example = Path(__file__).resolve().parents[2] / "etc" / "hivebatch.example.yaml"
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(example))  # the lab: 4 nodes x 8 V100
    r = invoke(
        "model", "predict", "--name", "resnet50", "--batch", "256", "--nodes", "5", "--gpus-per-node", "8"
    )
    assert (
        r.exit_code != 0
        and "does not fit the configured cluster (4 nodes, at most 8 GPUs per node)" in str(r.exception)
    )
    r = invoke(
        "model",
        "predict",
        "--name",
        "resnet50",
        "--batch",
        "256",
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--json",
    )
    assert r.exit_code == 0 and json.loads(r.output)["gpu_type"] == "V100"


def test_predict_shows_the_range_and_says_when_it_extrapolates(env: Path) -> None:
    # the shipped imagenet/V100 profile was measured at local batch 20..200 on up to 2 nodes x 8 GPUs
    r = invoke("model", "predict", "--name", "imagenet", "--gpu-type", "V100", "--batch", "64", "--json")
    inside = json.loads(r.output)
    assert inside["outside_profiled"] == []
    assert inside["throughput_low"] < inside["throughput"] < inside["throughput_high"]
    r = invoke("model", "predict", "--name", "imagenet", "--gpu-type", "V100", "--batch", "640",
               "--nodes", "8", "--gpus-per-node", "8", "--json")  # fmt: skip
    far = json.loads(r.output)
    assert len(far["outside_profiled"]) == 2 and far["throughput"] > 0
    assert (
        far["throughput_high"] / far["throughput_low"] > inside["throughput_high"] / inside["throughput_low"]
    )
    r = invoke("model", "predict", "--name", "imagenet", "--gpu-type", "V100", "--batch", "640",
               "--nodes", "8", "--gpus-per-node", "8")  # fmt: skip
    assert r.exit_code == 0 and "expected range" in r.output and "(extrapolated: shape 8x8 beyond" in r.output
