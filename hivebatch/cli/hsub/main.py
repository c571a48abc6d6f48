"""``hsub``: sbatch-compatible submission through hivebatch.

The job goes to Slurm held, as the invoking user, with no GPU gres, account = VC and qos = class;
its hivebatch request rides in the Slurm comment. The controller later gives it exact GPUs and
releases it. Options are parsed by hand (not click) so the same table reads the command line,
``#SBATCH``/``#HSUB`` lines and ``SBATCH_*`` variables, and so start-up stays close to sbatch's.
"""

from __future__ import annotations

import io
import os
import shlex
import sys
from typing import TYPE_CHECKING

from hivebatch.errors import HivebatchError

if TYPE_CHECKING:
    from hivebatch.submit.build import Submission

PROG = "hsub"


PLUGIN_REFUSAL = "sbatch: error: hivebatch: "


def _err(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def slurm_refusal(exc: Exception, vc: str, qos: str) -> str:
    """One line saying why Slurm refused the submission, in hivebatch's terms."""
    stderr = str(getattr(exc, "stderr", "") or exc)
    for line in stderr.splitlines():
        # the job_submit plugin's own line (a limit, an impossible ask) says what to fix; sbatch's
        # "Batch job submission failed" after it does not
        if line.startswith(PLUGIN_REFUSAL):
            return line[len("sbatch: error: ") :].strip()
    lower = stderr.lower()
    if "invalid account" in lower or "account/partition" in lower:
        return (
            f"Slurm refused the job: you may not submit into virtual cluster {vc!r} "
            "(it is not one of your Slurm accounts; ask its owner or your administrator)"
        )
    if "invalid qos" in lower or "qos" in lower and "not" in lower:
        return f"Slurm refused the job: class {qos!r} is not granted to you in virtual cluster {vc!r}"
    return f"Slurm refused the job: {_error_text(stderr)}"


def _error_text(stderr: str) -> str:
    """sbatch's error lines as one sentence: it breaks one message over several lines
    (tests/fixtures/slurm/err_submit_dos_line_breaks.txt), whose last alone says nothing."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("sbatch: error: ", "error: "))] or lines[-1:]
    parts = [
        ln.split("error: ", 1)[1] if ln.startswith(("sbatch: error: ", "error: ")) else ln for ln in errors
    ]
    return " ".join(parts) or "no message"


def run(argv: list[str]) -> int:
    from hivebatch.submit.options import parse_args

    first = parse_args(argv)
    if first.values.get("help") or first.values.get("usage"):
        from hivebatch.submit.options import help_text

        print(help_text())
        return 0
    if first.values.get("version"):
        from hivebatch import __version__

        print(f"hsub (hivebatch) {__version__}")
        return 0

    from hivebatch.submit.build import prepare, stdin_reader

    sub = prepare(argv, stdin_read=stdin_reader())
    if not sub.quiet:  # sbatch -Q shows no notes either
        for note in sub.notes:
            print(f"{PROG}: note: {note}", file=sys.stderr)

    if sub.dry_run:
        script = sub.job_script()
        if isinstance(sys.stdout, io.TextIOWrapper):
            # a script's bytes that are not UTF-8 are printed as they are, as sbatch would get them
            sys.stdout.reconfigure(errors="surrogateescape")
        print("# sbatch command (the job script below is given on its standard input):")
        print(shlex.join(sub.sbatch_command()))
        print("# job script:")
        sys.stdout.write(script)
        return 0
    from hivebatch.slurm import SlurmError, get_backend

    prediction = None
    if sub.test_only:
        from hivebatch.submit.testonly import predict, render_prediction

        prediction = render_prediction(sub, predict(sub))
    script = sub.job_script()
    # the backend runs sbatch with this process's environment: drop the variables of what hsub writes
    # itself (the GPU ask among them) so sbatch cannot apply them a second time, and add what hsub
    # translated into one (#PBS -W umask= is SLURM_UMASK)
    for name in [k for k in os.environ if k not in sub.env]:
        del os.environ[name]
    os.environ.update(sub.env)
    try:
        if prediction is not None:
            # Slurm judges the job first, as it would at submission: seen on the lab, hsub --test-only
            # said "would start now" of jobs sbatch refused (a node name or feature the cluster lacks,
            # more memory than a GPU node has)
            get_backend().check_submission(script, sub.sbatch_args)
            print(prediction)
            return 0
        if sub.attached:
            return _attached(sub, script)
        job_id, told = get_backend().submit_told(script, sub.sbatch_args)
    except SlurmError as exc:
        raise HivebatchError(slurm_refusal(exc, sub.request.vc, sub.request.qos)) from None
    relay_told(told, sub.notes)
    if sub.parsable:
        print(job_id)
    else:
        print(f"Submitted batch job {job_id}")
    return 0


# what sbatch --wait says while it waits, after the job was accepted (src/sbatch/sbatch.c, _job_wait)
_WAITING = ("sbatch: error: Job ", "sbatch: error: Currently unable to load job state")


def _attached(sub: Submission, script: str) -> int:
    """sbatch shows the outcome itself (-Q, --wait); hsub passes its exit code on (with --wait, the
    job's) and turns a refusal into hsub's one line, as for any other submission."""
    from hivebatch.slurm.attached import sbatch_attached

    refused: list[str] = []

    def told(line: str) -> None:
        if line.startswith("sbatch: error: ") and not line.startswith(_WAITING):
            refused.append(line)
        else:
            relay_told([line], sub.notes)

    code = sbatch_attached(script, sub.sbatch_command()[1:], told)
    if code != 0 and refused:
        raise HivebatchError(slurm_refusal(Exception("\n".join(refused)), sub.request.vc, sub.request.qos))
    for line in refused:
        print(line, file=sys.stderr)
    return code


def relay_told(lines: list[str], said: list[str]) -> None:
    """What sbatch told its user on acceptance, as sbatch shows it: the job_submit plugin's notes as
    hsub's own (once: hsub may have said the same before submitting), anything else as sbatch wrote it."""
    for line in lines:
        note = line.removeprefix("sbatch: hivebatch: note: ")
        if note == line:
            print(line, file=sys.stderr)
        elif note not in said:
            print(f"{PROG}: note: {note}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except HivebatchError as exc:
        _err(str(exc))
        code = 1
    except BrokenPipeError:
        code = 0
    except KeyboardInterrupt:
        _err("interrupted; nothing was submitted unless a job id was printed")
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
