"""The profiling run: job script, throughput parsing, dropped batch sizes, fit with borrowed sync terms."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from qos_helpers import simple_profile

from hivebatch.cli.hadmin.main import cli as hadmin
from hivebatch.errors import HivebatchError
from hivebatch.profiling_job import wait_for_job
from hivebatch.qos import Shape
from hivebatch.qos.fitting import Sample
from hivebatch.qos.profiling import (
    check_model_name,
    command_for,
    fit_single_gpu,
    job_script,
    parse_batch_sizes,
    parse_throughput,
    read_run,
    samples_csv,
    sbatch_args,
)
from hivebatch.testing.fake_slurm import FakeSlurm


def test_job_script_quotes_every_word(tmp_path: Path) -> None:
    odd = tmp_path / "it's a dir"
    text = job_script(odd, ["python3", str(odd / "my script.py")], [8, 16], 100, "m")
    assert text.startswith("#!/bin/bash\n")
    assert f"cd {shlex.quote(str(odd))} || exit 1" in text
    assert f'python3 {shlex.quote(str(odd / "my script.py"))} --batch-size "$b" --iterations 100' in text
    assert "for b in 8 16; do" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_job_script_runs_the_interface(tmp_path: Path) -> None:
    """The generated script, run by bash here, calls the user script as documented."""
    user = tmp_path / "train.sh"
    user.write_text(
        '#!/bin/bash\necho "args=$* env=$HIVEBATCH_BATCH_SIZE/$HIVEBATCH_ITERATIONS"\necho "$(( $2 * 10 )) samples/s"\n'
    )
    subprocess.run(["bash", "-c", job_script(tmp_path, ["bash", str(user)], [4, 8], 7, "m")], check=True)
    assert (
        tmp_path / "run-4.out"
    ).read_text() == "args=--batch-size 4 --iterations 7 env=4/7\n40 samples/s\n"
    assert (tmp_path / "run-8.rc").read_text().strip() == "0"
    res = read_run(tmp_path, [4, 8])
    assert [s.throughput for s in res.samples] == pytest.approx([40, 80])


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("epoch 1\nthroughput: 123.5 samples/s\n", 123.5),
        ("1.5e3 samples/s\nlater 99 samples / s\n", 99.0),
        ("warming up\n250.25\n", 250.25),
        ("12 samples/s\n300\n", 12.0),  # the unit-marked line wins over a bare number
        ("no numbers here\n", None),
        ("", None),
    ],
)
def test_parse_throughput(text: str, rate: float | None) -> None:
    assert parse_throughput(text) == rate


def test_read_run_drops_failed_and_silent_sizes(tmp_path: Path) -> None:
    for b, rc, out, err in (
        (8, "0", "80 samples/s", ""),
        (16, "0", "120 samples/s", ""),
        (32, "1", "", "CUDA out of memory"),
        (64, "0", "hello", ""),
    ):
        (tmp_path / f"run-{b}.rc").write_text(rc + "\n")
        (tmp_path / f"run-{b}.out").write_text(out + "\n")
        (tmp_path / f"run-{b}.err").write_text(err + "\n")
    res = read_run(tmp_path, [8, 16, 32, 64, 128])
    assert [(s.local_batch, s.step_time) for s in res.samples] == [(8, 0.1), (16, pytest.approx(16 / 120))]
    assert res.dropped == {
        32: "exit 1: CUDA out of memory",
        64: "printed no positive 'N samples/s' line",
        128: "did not run",
    }
    assert samples_csv(res.samples).splitlines()[1] == "8,0.1,0,1"


def test_fit_single_gpu_recovers_and_borrows_sync() -> None:
    samples = [Sample(Shape(1, 1), float(b), 0.02 + 0.001 * b) for b in (8, 16, 32, 64)]
    borrow = simple_profile(t0=5.0, s_multi=0.03, s_lognode=0.07)
    prof = fit_single_gpu("new", "V100", samples, borrow)
    assert prof.coefficients["t0"] == pytest.approx(0.02, rel=1e-4)
    assert prof.coefficients["t_w"] == pytest.approx(0.001, rel=1e-4)
    assert (prof.coefficients["s_multi"], prof.coefficients["s_lognode"]) == (0.03, 0.07)
    assert prof.family == "cnn" and "communication terms from toy/V100" in prof.source
    alone = fit_single_gpu("new", "V100", samples[:2], None)
    assert alone.coefficients["s_multi"] == 0 and alone.coefficients["t_sqrtw"] == 0
    with pytest.raises(HivebatchError, match="two or more batch sizes"):
        fit_single_gpu("new", "V100", samples[:1], None)


def test_input_checks() -> None:
    assert parse_batch_sizes("64, 16,32") == [16, 32, 64]
    for bad in ("16", "a,b", "0,8"):
        with pytest.raises(HivebatchError, match="--batch-sizes"):
            parse_batch_sizes(bad)
    check_model_name("resnet50_v1.5")
    with pytest.raises(HivebatchError, match="model name"):
        check_model_name("../../etc")


@pytest.fixture
def profiles_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store" / "profiles.json"
    monkeypatch.setenv("HIVEBATCH_PROFILES", str(store))
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(tmp_path / "absent.yaml"))
    monkeypatch.setattr("hivebatch.slurm.get_backend", lambda name=None: FakeSlurm())
    return store


def test_run_no_wait_submits_one_gpu_job(profiles_env: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('1 samples/s')\n")
    r = CliRunner().invoke(
        hadmin,
        ["profile", "run", "--model", "mynet", "--script", str(script), "--gpu-type", "V100", "--batch-sizes", "8,16",
         "--no-wait", "--json", "--output-dir", str(tmp_path / "runs"), "--qos", "opportunistic"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    run_dir = Path(out["run_dir"])
    assert out["job_id"] >= 1 and run_dir.parent == tmp_path / "runs"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["job_id"] == out["job_id"] and meta["batch_sizes"] == [8, 16]
    assert (run_dir / "user-script.py").read_text() == script.read_text()
    assert f"python3 {run_dir / 'user-script.py'}" in (run_dir / "job.sh").read_text()


def test_run_refuses_bad_input(profiles_env: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    r = CliRunner().invoke(
        hadmin, ["profile", "run", "--model", "m", "--script", str(script), "--batch-sizes", "8,16"]
    )
    assert r.exit_code != 0 and "--gpu-type is required" in r.output
    r = CliRunner().invoke(
        hadmin,
        ["profile", "run", "--model", "m", "--script", str(script), "--gpu-type", "V100", "--iters", "0"],
    )
    assert r.exit_code != 0 and "--iters must be >= 1" in r.output


def test_collect_fits_and_stores(profiles_env: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    meta = {"model": "mynet", "gpu_type": "V100", "batch_sizes": [8, 16, 32, 64], "iters": 100, "like": "resnet50",
            "family": None, "params_m": None, "profiles": None, "job_id": 42}  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps(meta))
    for b in (8, 16, 32, 64):
        (run_dir / f"run-{b}.rc").write_text("0\n")
        (run_dir / f"run-{b}.out").write_text(f"{b / (0.02 + 0.001 * b):.6f} samples/s\n")
    r = CliRunner().invoke(hadmin, ["profile", "collect", str(run_dir), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["coefficients"]["t_w"] == pytest.approx(0.001, rel=1e-3)
    assert "communication terms from resnet50/V100" in out["source"]
    stored = json.loads(profiles_env.read_text())["profiles"]
    assert [(p["name"], p["gpu_type"], p["job_id"]) for p in stored] == [("mynet", "V100", 42)]
    assert (run_dir / "placements-V100.csv").exists()


def test_collect_needs_a_run_dir(profiles_env: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(hadmin, ["profile", "collect", str(tmp_path)])
    assert r.exit_code != 0 and "not a profiling run directory" in str(r.exception)


def test_command_for_follows_interpreter_then_executable_then_suffix(tmp_path: Path) -> None:
    py, sh = tmp_path / "train.py", tmp_path / "train.sh"
    assert command_for(py, "python3 -u", executable=True) == ["python3", "-u", str(py)]
    assert command_for(py, None, executable=True) == [str(py)]
    assert command_for(py, None, executable=False) == ["python3", str(py)]
    assert command_for(sh, None, executable=False) == ["bash", str(sh)]


def test_sbatch_args_one_gpu_and_only_the_options_given(tmp_path: Path) -> None:
    args = sbatch_args("mynet", "00:30:00", tmp_path, qos="opportunistic")
    assert args[args.index("--gres") + 1] == "gpu:1" and args[args.index("--time") + 1] == "00:30:00"
    assert args[args.index("--output") + 1] == str(tmp_path / "slurm-%j.out")
    assert args[-2:] == ["--qos", "opportunistic"] and "--account" not in args and "--partition" not in args


def test_wait_for_job_returns_the_end_state_or_times_out(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    job = slurm.submit("#!/bin/bash\ntrue\n", ["--gres", "gpu:1"])
    with pytest.raises(HivebatchError, match=f"profiling job {job} still RUNNING after 0 s"):
        wait_for_job(slurm, job, timeout=0, poll=0, run_dir=tmp_path)
    slurm.finish(job)
    assert wait_for_job(slurm, job, timeout=0, poll=0, run_dir=tmp_path) == "COMPLETED"
    assert wait_for_job(slurm, 999, timeout=0, poll=0, run_dir=tmp_path) == "DONE"
