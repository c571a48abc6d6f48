"""The generated job script: the user's script verbatim, arguments quoted, nothing expanded."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from hivebatch.submit.script import heredoc_delimiter, read_directives, render_job_script

NASTY_ARGS = [
    "plain",
    "two words",
    "$(touch PWNED)",
    "`touch PWNED2`",
    "it's",
    '"q"',
    "a\nb",
    "*",
    "$HOME",
    "",
]


def run_job(
    tmp_path: Path, text: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    job = tmp_path / "job.sh"
    job.write_text(text)
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "HOME": "/nonexistent", **(env_extra or {})}
    return subprocess.run(
        ["bash", str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )


def test_arguments_arrive_exactly_and_nothing_is_expanded(tmp_path: Path) -> None:
    user = (
        '#!/bin/bash\nfor a in "$@"; do printf "<%s>\\n" "$a"; done\necho \'$(touch PWNED3)\' "$USER_SAYS"\n'
    )
    text = render_job_script(user, NASTY_ARGS, vc="cv", qos="normal")
    proc = run_job(tmp_path, text, {"USER_SAYS": "ok"})
    assert proc.returncode == 0, proc.stderr
    expected = "".join(f"<{a}>\n" for a in NASTY_ARGS) + "$(touch PWNED3) ok\n"
    assert proc.stdout == expected
    assert not list(tmp_path.glob("PWNED*"))
    # the temporary copy of the user's script is removed afterwards
    assert not list(tmp_path.glob("hivebatch-job.*"))


def test_script_containing_the_delimiter_survives(tmp_path: Path) -> None:
    user = "#!/bin/sh\ncat <<'HIVEBATCH_SCRIPT_END'\ninner\nHIVEBATCH_SCRIPT_END\necho after\n"
    assert heredoc_delimiter(user) != "HIVEBATCH_SCRIPT_END"
    proc = run_job(tmp_path, render_job_script(user, [], vc="cv", qos="normal"))
    assert proc.stdout == "inner\nafter\n", proc.stderr


def test_exit_status_and_interpreter_are_the_users(tmp_path: Path) -> None:
    user = "#!/usr/bin/env python3\nimport sys\nprint('py', sys.argv[1:])\nsys.exit(3)\n"
    proc = run_job(tmp_path, render_job_script(user, ["x"], vc="cv", qos="prior"))
    assert proc.returncode == 3
    assert proc.stdout == "py ['x']\n"
    assert "hivebatch: job" in proc.stderr


def test_environment_tells_the_job_its_vc_and_memory(tmp_path: Path) -> None:
    user = '#!/bin/sh\necho "$HIVEBATCH_VC $HIVEBATCH_CLASS ${HIVEBATCH_GPU_MEM_MIB:-none}"\n'
    proc = run_job(tmp_path, render_job_script(user, [], vc="nlp", qos="opportunistic", gpu_mem_mib=8192))
    assert proc.stdout == "nlp opportunistic 8192\n"


def test_no_sbatch_directives_reach_sbatch_from_the_users_script() -> None:
    # sbatch reads #SBATCH lines only before the first command: the user's lines sit after commands
    text = render_job_script("#!/bin/sh\n#SBATCH --gpus=8\ntrue\n", [], vc="cv", qos="normal")
    head = []
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        head.append(line)
    assert not [h for h in head if h.startswith("#SBATCH")]
    assert text.index("#SBATCH --gpus=8") > text.index("cat >")


def _wait_for(path: Path, timeout: float = 10.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert path.exists(), f"{path.name} never appeared"


def _started(tmp_path: Path, user: str, qos: str) -> subprocess.Popen[str]:
    """hsub's job script around ``user`` running, once the user's script has touched ``started``."""
    job = tmp_path / "job.sh"
    job.write_text(render_job_script(user, [], vc="cv", qos=qos))
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "HOME": "/nonexistent"}
    # slurmstepd starts a batch script with every signal at its default, whatever this test inherited
    # (a runner started in the background of a non-interactive shell ignores SIGINT)
    proc = subprocess.Popen(
        ["bash", str(job)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for(tmp_path / "started")
    return proc


def test_a_signal_to_the_batch_shell_reaches_the_users_trap(tmp_path: Path) -> None:
    """--signal=B:USR1 signals the batch shell alone: the wrapper passes it on, the user's trap runs
    (checkpoints), the script goes on after the trap, and its exit status is the job's."""
    import signal

    user = (
        "#!/bin/bash\n"
        "trap 'echo saved > checkpoint; touch trapped' USR1\n"
        "touch started\n"
        "for i in 1 2 3 4 5 6 7 8 9 10; do [ -e go-on ] && break; sleep 0.2 & wait; done\n"
        "echo after-trap\n"
        "exit 7\n"
    )
    proc = _started(tmp_path, user, "opportunistic")
    proc.send_signal(signal.SIGUSR1)  # the batch shell alone, as scancel --batch does
    _wait_for(tmp_path / "trapped")
    (tmp_path / "go-on").touch()
    out, _ = proc.communicate(timeout=30)
    assert (tmp_path / "checkpoint").read_text() == "saved\n"
    assert out == "after-trap\n"
    assert proc.returncode == 7


def test_sigint_reaches_the_users_trap_although_the_script_runs_in_the_background(tmp_path: Path) -> None:
    """bash starts a background command with SIGINT ignored, and a script cannot trap a signal
    ignored when it started: the wrapper puts it back before running the user's script."""
    import signal

    user = "#!/bin/bash\ntrap 'echo interrupted; exit 9' INT\ntouch started\nsleep 5 >/dev/null & wait\n"
    proc = _started(tmp_path, user, "normal")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert out == "interrupted\n"
    assert proc.returncode == 9


def test_a_signal_that_kills_the_users_script_is_the_jobs_end(tmp_path: Path) -> None:
    import signal

    user = "#!/bin/bash\ntouch started\nsleep 5 >/dev/null & wait\necho never\n"
    proc = _started(tmp_path, user, "normal")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert out == ""
    assert proc.returncode == 128 + signal.SIGTERM
    assert not list(tmp_path.glob("hivebatch-job.*"))


def test_stdin_still_reaches_the_users_script(tmp_path: Path) -> None:
    job = tmp_path / "job.sh"
    job.write_text(render_job_script("#!/bin/sh\ncat\n", [], vc="cv", qos="normal"))
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "HOME": "/nonexistent"}
    proc = subprocess.run(
        ["bash", str(job)], input="in\n", env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.stdout == "in\n"


def test_signal_option_becomes_a_directive_the_plugin_reads() -> None:
    text = render_job_script(
        "#!/bin/sh\ntrue\n", [], vc="cv", qos="normal", directives=["--signal=B:USR1@120"]
    )
    assert text.splitlines()[:2] == ["#!/bin/bash", "#SBATCH --signal=B:USR1@120"]
    # a line break would end the comment line: build leaves such a value to sbatch's command line
    with pytest.raises(ValueError, match="line break"):
        render_job_script(
            "#!/bin/sh\ntrue\n", [], vc="cv", qos="normal", directives=["--signal=USR1\necho x"]
        )


@pytest.mark.parametrize(
    "option",
    ["--comment=a b", "--export=A='x y',B=\"q\"", "--chdir=/tmp/with#hash", "--job-name=back\\slash",
     "--mail-user=$HOME", "--constraint=a&b|c", "--output=o\r.txt", "--wckey=", '--comment=""'],
)  # fmt: skip
def test_a_directive_reads_back_as_the_option_it_was(option: str) -> None:
    text = render_job_script("#!/bin/sh\ntrue\n", [], vc="cv", qos="normal", directives=[option])
    assert read_directives(text).tokens == [option]


def test_hsub_writes_its_signal_into_the_job_script() -> None:
    from hivebatch.submit.build import prepare

    argv = ["-A", "cv", "--gpus", "1", "--signal", "B:USR1@120", "--wrap", "true"]
    sub = prepare(argv, environ={"SBATCH_SIGNAL": "TERM@30"}, check_config=False)
    assert not any(a.startswith("--signal") for a in sub.sbatch_args)
    assert "SBATCH_SIGNAL" not in sub.env  # it would override the directive in sbatch
    assert "#SBATCH --signal=B:USR1@120" in sub.job_script().splitlines()[:3]


def test_a_latin1_script_reaches_sbatch_byte_for_byte(tmp_path: Path) -> None:
    # seen on the lab: a Latin-1 `echo "café"` printed caf\303\251 under hsub and caf\351 under sbatch
    from hivebatch.slurm.cli import subprocess_runner
    from hivebatch.submit.build import prepare

    path = tmp_path / "lat.sh"
    path.write_bytes(b'#!/bin/bash\n#SBATCH -J caf\xe9\necho "caf\xe9"\n')
    sub = prepare([str(path)], environ={}, stdin_read=None, check_config=False, default_vc="cv")
    assert (
        os.fsencode(next(a for a in sub.sbatch_args if a.startswith("--job-name="))) == b"--job-name=caf\xe9"
    )
    hex_dump = subprocess_runner()(["od", "-An", "-v", "-tx1"], sub.job_script(), {}).stdout
    assert b'echo "caf\xe9"\n' in bytes.fromhex("".join(hex_dump.split()))  # what sbatch reads
