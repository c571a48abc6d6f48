"""The generated job script: the user's script verbatim, arguments quoted, nothing expanded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hivebatch.submit.script import heredoc_delimiter, render_job_script

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
