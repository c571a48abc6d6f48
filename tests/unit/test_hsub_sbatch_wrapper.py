"""The sbatch wrapper's decision: GPU jobs through hsub, everything else untouched to the real sbatch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hivebatch.cli.hsub.sbatch_wrapper import scan, script_asks_for_gpus

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "gpu", "own", "script_at"),
    [
        (["job.sh"], False, False, 0),
        (
            ["-A", "cv", "-N", "2", "job.sh", "--gpus", "4"],
            False,
            False,
            4,
        ),  # options after the script are its args
        (["--gpus=2", "job.sh"], True, False, 1),
        (["-G", "2", "job.sh"], True, False, 2),
        (["--gres", "gpu:V100:1", "job.sh"], True, False, 2),
        (["--gres=license:1", "job.sh"], False, False, 1),
        (["--gpus-per-node", "2", "--wrap", "hostname"], True, False, None),
        (["--parsable", "--hold", "-J", "x", "job.sh"], False, False, 4),
        (["--comment=hivebatch:v1:{}", "--gres=gpu:g3:1", "job.sh"], True, True, 2),
        (["--wrap=hostname"], False, False, None),
    ],
)
def test_scan(args: list[str], gpu: bool, own: bool, script_at: int | None) -> None:
    assert scan(args) == (gpu, own, script_at)


def test_script_directives() -> None:
    assert script_asks_for_gpus("#!/bin/bash\n#SBATCH -A cv\n#SBATCH --gres=gpu:2\nrun\n")
    assert script_asks_for_gpus("#!/bin/bash\n#HSUB --model resnet50\nrun\n")
    assert not script_asks_for_gpus(
        "#!/bin/bash\n#SBATCH -c 4\nrun\n#SBATCH --gpus=2\n"
    )  # after a command: ignored
    assert not script_asks_for_gpus("#!/bin/bash\n#SBATCH --mem=1G\n")


def fake_tools(tmp_path: Path) -> dict[str, str]:
    """A recording 'real sbatch' and 'hsub': each prints who it is, its arguments and its stdin."""
    for name in ("real-sbatch", "hsub"):
        p = tmp_path / name
        p.write_text(f'#!/bin/sh\necho "{name}"; for a in "$@"; do echo "arg:$a"; done; '
                     'if [ ! -t 0 ]; then sed "s/^/stdin:/"; fi\n')  # fmt: skip
        p.chmod(0o755)
    return {"HIVEBATCH_REAL_SBATCH": str(tmp_path / "real-sbatch"), "HIVEBATCH_HSUB": str(tmp_path / "hsub"),
            "PATH": os.environ["PATH"]}  # fmt: skip


def wrapper(
    tmp_path: Path, args: list[str], stdin: str = "", env_extra: dict[str, str] | None = None
) -> list[str]:
    env = {**fake_tools(tmp_path), **(env_extra or {})}
    proc = subprocess.run([str(PROJECT / "scripts" / "sbatch-wrapper"), *args], input=stdin, capture_output=True,
                          text=True, env={**env, "HIVEBATCH_PYTHON": sys.executable}, cwd=tmp_path, timeout=60,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_cpu_job_reaches_real_sbatch_untouched(tmp_path: Path) -> None:
    (tmp_path / "cpu.sh").write_text("#!/bin/sh\n#SBATCH -c 2\necho hi\n")
    args = ["-J", "two words", "--mem=1G", "cpu.sh", "--gpus=2", "$(x)"]
    assert wrapper(tmp_path, args) == ["real-sbatch", *[f"arg:{a}" for a in args]]


def test_gpu_jobs_go_through_hsub(tmp_path: Path) -> None:
    (tmp_path / "gpu.sh").write_text("#!/bin/sh\n#SBATCH --gpus=2\necho hi\n")
    assert wrapper(tmp_path, ["-A", "cv", "gpu.sh"])[0] == "hsub"
    assert wrapper(tmp_path, ["--gpus", "1", "--wrap", "true"])[0] == "hsub"
    assert wrapper(tmp_path, ["--wrap", "true"], env_extra={"SBATCH_GPUS": "1"})[0] == "hsub"


def test_script_on_stdin_is_read_and_handed_on(tmp_path: Path) -> None:
    cpu = "#!/bin/sh\n#SBATCH -c 1\ntrue\n"
    assert wrapper(tmp_path, ["-A", "cv"], stdin=cpu) == ["real-sbatch", "arg:-A", "arg:cv", "stdin:#!/bin/sh",
                                                          "stdin:#SBATCH -c 1", "stdin:true"]  # fmt: skip
    gpu = "#!/bin/sh\n#SBATCH --gres=gpu:1\ntrue\n"
    out = wrapper(tmp_path, [], stdin=gpu)
    assert out[0] == "hsub" and "stdin:#SBATCH --gres=gpu:1" in out


def test_hivebatchs_own_submissions_go_straight_to_sbatch(tmp_path: Path) -> None:
    out = wrapper(
        tmp_path,
        ["--parsable", "--hold", '--comment=hivebatch:v1:{"vc":"cv"}', "--gpus=2"],
        stdin="#!/bin/sh\n",
    )
    assert out[0] == "real-sbatch"


def test_gpu_asks_are_read_as_sbatch_reads_them() -> None:
    assert scan(["--gpus-per-n=2", "job.sh"])[0]  # an abbreviation sbatch accepts
    assert not scan(["-J", "--gpus=2", "job.sh"])[0]  # the job's name, not a GPU ask
    assert scan(["--nice", "job.sh"]) == (False, False, 1)  # --nice takes no separate value
    assert script_asks_for_gpus("#!/bin/sh\n#SBATCH--gres=gpu:4\n")  # no blank after #SBATCH
    assert not script_asks_for_gpus("#!/bin/sh\n  #SBATCH --gpus=4\n")  # indented: a comment
    assert script_asks_for_gpus(b"#!/bin/sh\n# caf\xe9\n#SBATCH -G 1\n")  # Latin-1 bytes
