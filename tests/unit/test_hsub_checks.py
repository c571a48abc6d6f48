"""hsub's checks against the cluster config (the lab's example config), before anything reaches Slurm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hivebatch.config import load_config
from hivebatch.errors import HivebatchError
from hivebatch.request import JobRequest
from hivebatch.submit.checks import check_request, even_placement

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "etc" / "hivebatch.example.yaml"


@pytest.fixture(scope="module")
def config() -> tuple[Path, dict]:
    return load_config(EXAMPLE)


def check(config: tuple[Path, dict], **fields: object) -> tuple[JobRequest, list[str]]:
    path, data = config
    req, notes, _env = check_request(JobRequest(**{"vc": "cv", **fields}), data, path)  # type: ignore[arg-type]
    return req, notes


def test_a_fitting_request_passes_and_names_are_normalised(config) -> None:  # type: ignore[no-untyped-def]
    req, notes = check(config, gpus=2, gpu_type="v100")
    assert req.gpu_type == "V100" and notes == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"vc": "vision"}, "unknown virtual cluster 'vision'"),
        ({"vc": "sys", "gpus": 8}, "virtual cluster sys holds at most 4 GPUs"),
        ({"gpus": 40, "qos": "opportunistic"}, "the cluster has 32"),
        ({"gpus": 2, "gpu_type": "A100"}, "unknown GPU type 'A100'"),
        ({"gpus": 3, "nodes": 2}, "can never run in virtual cluster cv"),
        ({"gpus": 1, "model": "nosuchnet", "batch_size": 8, "iters": 10}, "nosuchnet"),
    ],
)
def test_requests_that_can_never_run_are_refused(config, fields: dict, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HivebatchError, match=message) as info:
        check(config, **fields)
    assert "\n" not in str(info.value)


def test_gpus_no_node_count_splits_evenly_run_as_the_plugin_runs_them(config) -> None:  # type: ignore[no-untyped-def]
    # hsub's sbatch options then ask for what the job_submit plugin would make of the ask (tests/lua)
    req, notes = check(config, vc="nlp", gpus=3, nodes=2)
    assert (req.gpus, req.nodes, req.gpus_per_node) == (4, 2, 2)
    assert notes == ["3 GPUs run as 2 on each of 2 nodes (4 in all, counted against nlp): "
                     "a job gets the same GPUs on every node here"]  # fmt: skip
    req, notes = check(config, vc="nlp", gpus=11)
    assert (req.gpus, req.nodes, req.gpus_per_node) == (12, 2, 6)
    req, notes = check(config, vc="sys", gpus=3, nodes=2, qos="opportunistic")
    assert req.gpus == 4 and notes == [
        "3 GPUs run as 2 on each of 2 nodes (4 in all): a job gets the same GPUs on every node here"
    ]
    req, notes = check(config, vc="nlp", gpus=16)
    assert (req.gpus, req.nodes, notes) == (16, None, [])  # 2 x 8: the shape stays open


@pytest.mark.parametrize(
    ("total", "nodes", "room", "expect"),
    [
        (3, 2, 4, (2, 4)),  # -N 2 --gpus=3
        (4, 2, 4, (2, 4)),
        (11, None, 4, (2, 12)),
        (12, None, 4, (None, 12)),  # 2 x 6
        (9, None, 2, (2, 10)),  # 3 x 3 would need a third node
        (9, None, 4, (None, 9)),
        (13, None, 1, (2, 14)),  # beyond reach: the cells say why
        (40, None, 4, (None, 40)),
    ],
)
def test_even_placement(total: int, nodes: int | None, room: int, expect: tuple[int | None, int]) -> None:
    assert even_placement(total, nodes, 8, room) == expect


def test_opportunistic_jobs_may_borrow_beyond_their_vc(config) -> None:  # type: ignore[no-untyped-def]
    req, _ = check(config, vc="sys", gpus=8, qos="opportunistic")
    assert req.gpus == 8


def test_a_new_model_borrows_a_profile_with_like(config) -> None:  # type: ignore[no-untyped-def]
    req, notes = check(config, gpus=2, model="mynet", like="resnet50", batch_size=64, iters=100)
    assert req.model == "mynet"
    assert notes and "resnet50" in notes[0]


def run_hsub(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {"HIVEBATCH_CONFIG": str(EXAMPLE), "PATH": "/usr/bin:/bin", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "hivebatch.cli.hsub.main", *args], capture_output=True, text=True,
                          env=env, cwd=PROJECT, timeout=60, check=False)  # fmt: skip


def test_cli_errors_are_one_line_with_exit_status_1(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    proc = run_hsub("-A", "sys", "--gpus", "8", str(script))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "hsub: error: virtual cluster sys holds at most 4"
    )


def test_dry_run_prints_command_and_script_without_slurm(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J named\necho hi\n")
    # no Slurm on PATH: a dry run must not need it
    proc = run_hsub("-A", "cv", "--gpus", "2", "--dry-run", str(script), "it's")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # the GPU ask goes to sbatch as sbatch's own option; Slurm's job_submit plugin holds the job
    assert lines[1].startswith("sbatch --parsable --gpus=2 --job-name=named --open-mode=append --account=cv")
    assert "--hold" not in lines[1] and "--comment" not in lines[1]
    assert "#!/bin/bash" in lines and "echo hi" in lines
    assert "( trap - INT QUIT; exec \"$hb_script\" 'it'\"'\"'s' ) <&0 &" in lines


def test_dry_run_does_not_import_heavy_modules(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    code = (
        "import sys; from hivebatch.cli.hsub import main as hsub\n"
        f"hsub.run(['-A', 'cv', '--gpus', '2', '--dry-run', {str(script)!r}])\n"
        "heavy = sorted(m for m in ('sqlalchemy', 'rich', 'numpy', 'click') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env={"HIVEBATCH_CONFIG": str(EXAMPLE), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "HEAVY []"


def test_help_lists_the_options() -> None:
    proc = run_hsub("--help")
    assert proc.returncode == 0
    for opt in (
        "--account",
        "--qos",
        "--gpus-per-node",
        "--model",
        "--like",
        "--dry-run",
        "--test-only",
        "--wrap",
    ):
        assert opt in proc.stdout


def test_a_gpu_slice_gets_its_limit_in_the_job_environment(config) -> None:  # type: ignore[no-untyped-def]
    path, data = config
    _req, notes, env = check_request(JobRequest(vc="cv", gpus=1, gpu_mem_mib=8000), data, path)
    assert env["HIVEBATCH_GPU_MEM_MIB"] == "8192"  # rounded up to whole 1 GiB shards
    assert env["HIVEBATCH_GPU_MEM_FRACTION"] == "0.250"
    assert notes and "shares one V100 GPU" in notes[0]


def test_a_slice_bigger_than_a_gpu_is_refused_in_one_line(config) -> None:  # type: ignore[no-untyped-def]
    path, data = config
    with pytest.raises(HivebatchError, match="more than one V100 GPU has") as info:
        check_request(JobRequest(vc="cv", gpus=1, gpu_mem_mib=40 * 1024), data, path)
    assert "\n" not in str(info.value)


def test_gpu_mem_with_several_gpus_means_whole_gpus(config) -> None:  # type: ignore[no-untyped-def]
    path, data = config
    _req, notes, env = check_request(JobRequest(vc="cv", gpus=2, gpu_mem_mib=20 * 1024), data, path)
    assert env == {} and "whole GPU" in notes[0]


def test_every_problem_of_the_request_is_told_at_once() -> None:
    from hivebatch.submit.build import build_request

    with pytest.raises(HivebatchError) as err:
        build_request({"qos": "vip", "gpus": "3", "gpus_per_node": "2", "time": "2h", "iters": "10"})
    assert str(err.value).splitlines() == [
        "5 problems:",
        "  say which virtual cluster to use with -A VC (--account), as with sbatch",
        "  unknown class 'vip' for -q/--qos: use one of urgent, prior, normal, opportunistic",
        "  --gpus 3 is not a multiple of --gpus-per-node 2",
        "  time limit '2h' is not a Slurm time: use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
        "  --batch-size and --iters describe a model: give --model too",
    ]
    with pytest.raises(HivebatchError, match="^--gpus 3 is not a multiple of --gpus-per-node 2$"):
        build_request({"account": "cv", "gpus": "3", "gpus_per_node": "2"})
