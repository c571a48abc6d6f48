"""An ``sbatch`` a site can put first in PATH: GPU jobs go through ``hsub``, all others to the real sbatch.

A job asks for GPUs when its command line, its ``SBATCH_*`` variables or the ``#SBATCH`` lines of its
script ask for GPUs (``--gpus``, ``-G``, ``--gpus-per-node``, ``--gpus-per-task``, ``--gres=gpu…``),
or when the script carries ``#HSUB`` lines. Everything else is handed to the real sbatch with the
same arguments and standard input, untouched. Jobs hivebatch itself submits (their comment starts
with the hivebatch prefix) always go straight to the real sbatch.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path

from hivebatch.request import PREFIX

REAL_ENV = "HIVEBATCH_REAL_SBATCH"
HSUB_ENV = "HIVEBATCH_HSUB"

# sbatch options that take no value (everything else takes one, inline or as the next word)
FLAG_LONG = {
    "hold", "parsable", "quiet", "verbose", "wait", "requeue", "no-requeue", "exclusive", "contiguous",
    "overcommit", "spread-job", "test-only", "use-min-nodes", "no-kill", "ignore-pbs", "get-user-env",
    "help", "version", "usage", "oversubscribe", "reboot", "nice", "propagate", "dry-run",
}  # fmt: skip
FLAG_SHORT = set("HQvWVhOsk")
GPU_LONG = ("gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "mem-per-gpu", "cpus-per-gpu")
GPU_SHORT = {"G"}
GPU_ENV = ("SBATCH_GPUS", "SBATCH_GPUS_PER_NODE", "SBATCH_GPUS_PER_TASK", "SBATCH_GRES")


def _gres_has_gpu(value: str) -> bool:
    return any(part.strip().split(":")[0] in ("gpu", "shard") for part in value.split(","))


def scan(args: list[str]) -> tuple[bool, bool, int | None]:
    """(asks for GPUs, submitted by hivebatch itself, index of the script argument or None)."""
    gpu = own = False
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            return gpu, own, (i + 1 if i + 1 < len(args) else None)
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            if not eq and name not in FLAG_LONG and i + 1 < len(args):
                value = args[i + 1]
                i += 1
            if name in GPU_LONG or name == "gres" and _gres_has_gpu(value):
                gpu = True
            if name == "comment" and value.startswith(PREFIX):
                own = True
            if name == "wrap":
                return gpu, own, None
        elif tok.startswith("-") and len(tok) > 1:
            letter = tok[1]
            if letter not in FLAG_SHORT and len(tok) == 2:
                i += 1
            if letter in GPU_SHORT:
                gpu = True
        else:
            return gpu, own, i
        i += 1
    return gpu, own, None


def script_asks_for_gpus(text: str) -> bool:
    """#SBATCH lines (before the first command, as sbatch reads them) asking for GPUs, or any #HSUB line."""
    for n, line in enumerate(text.splitlines()):
        s = line.strip()
        if n == 0 and s.startswith("#!") or not s:
            continue
        if not s.startswith("#"):
            break
        if s.startswith("#HSUB"):
            return True
        if s.startswith("#SBATCH"):
            try:
                words = shlex.split(s[len("#SBATCH") :], comments=True)
            except ValueError:
                continue
            if scan(words)[0]:
                return True
    return False


def find_real_sbatch() -> str:
    """$HIVEBATCH_REAL_SBATCH, else the first sbatch on PATH that is not this wrapper."""
    explicit = os.environ.get(REAL_ENV)
    if explicit:
        return explicit
    me = {Path(sys.argv[0]).resolve()} if sys.argv and sys.argv[0] else set()
    wrapper = os.environ.get("HIVEBATCH_SBATCH_WRAPPER")
    if wrapper:
        me.add(Path(wrapper).resolve())
    for d in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(d or ".") / "sbatch"
        if candidate.is_file() and os.access(candidate, os.X_OK) and candidate.resolve() not in me:
            try:
                head = candidate.read_bytes()[:2]
            except OSError:
                continue
            if head != b"#!":  # the real sbatch is a binary; scripts on PATH may be other wrappers
                return str(candidate)
    for fallback in ("/usr/bin/sbatch", "/usr/local/bin/sbatch"):
        if Path(fallback).is_file() and Path(fallback).resolve() not in me:
            return fallback
    print("sbatch: error: the real sbatch was not found: set HIVEBATCH_REAL_SBATCH", file=sys.stderr)
    sys.exit(1)


def find_hsub() -> list[str]:
    explicit = os.environ.get(HSUB_ENV)
    if explicit:
        return [explicit]
    return [sys.executable, "-m", "hivebatch.cli.hsub.main"]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    gpu, own, script_at = scan(args)
    gpu = gpu or any(os.environ.get(v) and _env_gpu(v) for v in GPU_ENV)
    stdin_data: bytes | None = None
    if not gpu and not own:
        if script_at is not None:
            # a missing script is left to the real sbatch, which reports it in its own words
            with contextlib.suppress(OSError):
                gpu = script_asks_for_gpus(
                    Path(args[script_at]).read_text(encoding="utf-8", errors="replace")
                )
        elif not any(a == "--wrap" or a.startswith("--wrap=") for a in args) and not sys.stdin.isatty():
            stdin_data = sys.stdin.buffer.read()  # the script comes on standard input: read, then hand on
            gpu = script_asks_for_gpus(stdin_data.decode("utf-8", errors="replace"))
    target = find_hsub() if gpu and not own else [find_real_sbatch()]
    if stdin_data is None:
        os.execv(target[0], [*target, *args])
    import subprocess

    sys.exit(subprocess.run([*target, *args], input=stdin_data).returncode)


def _env_gpu(name: str) -> bool:
    return name != "SBATCH_GRES" or _gres_has_gpu(os.environ.get(name, ""))


if __name__ == "__main__":
    main()
