"""hsub -Q and --wait: sbatch shows the outcome itself, as recorded on the lab
(tests/fixtures/slurm/sbatch_quiet_wait.txt). Seen through hsub before: -Q made hsub say "sbatch
printed no job id" of a job Slurm had taken, and --wait called a job that exited 3 "refused" (or
stopped waiting after 60 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivebatch.cli.hsub.main import run

PROJECT = Path(__file__).resolve().parents[2]
RECORDED = (PROJECT / "tests" / "fixtures" / "slurm" / "sbatch_quiet_wait.txt").read_text()

# sbatch as recorded: -Q prints no id (even with --parsable); --wait prints it, then exits with the
# job's code; the plugin's note is an info line, which -Q silences; a node the cluster lacks is refused
FAKE_SBATCH = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_ARGS"
cat > "$FAKE_ARGS.script"
quiet=; parsable=; wait=
for a in "$@"; do
  case "$a" in -Q|--quiet) quiet=1;; --parsable) parsable=1;; -W|--wait) wait=1;;
    --nodelist=node9) echo "sbatch: error: Batch job submission failed: Invalid node name specified" >&2; exit 1;;
  esac
done
[ -n "$quiet" ] || echo "sbatch: hivebatch: note: a note of the plugin's" >&2
if [ -z "$quiet" ]; then if [ -n "$parsable" ]; then echo 669; else echo "Submitted batch job 669"; fi; fi
[ -n "$wait" ] && exit 3
exit 0
"""


@pytest.fixture
def hsub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text(FAKE_SBATCH)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args"))
    config = tmp_path / "hivebatch.yaml"
    config.write_text((PROJECT / "etc" / "hivebatch.example.yaml").read_text())
    monkeypatch.setenv("HIVEBATCH_CONFIG", str(config))
    (tmp_path / "job.sh").write_text("#!/bin/sh\nexit 3\n")
    return tmp_path


def _hsub(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["-A", "cv", "--gpus=1", *args])
    out, err = capfd.readouterr()
    return code, out, err


def test_the_recording_says_what_the_fake_sbatch_does() -> None:
    assert "$ sbatch -Q --parsable fail.sh\nrc=0\nout:\nerr:" in RECORDED
    assert "$ sbatch --wait fail.sh\nrc=3\nout: Submitted batch job 670\n" in RECORDED
    assert "$ sbatch --parsable --wait fail.sh\nrc=3\nout: 669\n" in RECORDED


def test_quiet_prints_nothing_and_the_job_is_submitted(
    hsub_env: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _hsub(capfd, "-Q", str(hsub_env / "job.sh"))
    assert (code, out, err) == (0, "", "")
    args = (hsub_env / "args").read_text().splitlines()
    assert "--quiet" in args and "--parsable" not in args
    assert (hsub_env / "args.script").read_text().startswith("#!")


def test_wait_exits_with_the_jobs_exit_code_after_printing_its_id(
    hsub_env: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _hsub(capfd, "--wait", str(hsub_env / "job.sh"))
    assert (code, out) == (3, "Submitted batch job 669\n")
    assert err == "hsub: note: a note of the plugin's\n"
    assert "--wait" in (hsub_env / "args").read_text().splitlines()
    code, out, _ = _hsub(capfd, "-W", "--parsable", str(hsub_env / "job.sh"))
    assert (code, out) == (3, "669\n")


def test_a_refusal_while_attached_is_hsubs_one_line(
    hsub_env: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from hivebatch.errors import HivebatchError

    with pytest.raises(
        HivebatchError, match=r"^Slurm refused the job: Batch job submission failed: Invalid node name"
    ):
        run(["-A", "cv", "--gpus=1", "--wait", "-w", "node9", str(hsub_env / "job.sh")])
    assert capfd.readouterr().out == ""
