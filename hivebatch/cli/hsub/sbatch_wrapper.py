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
import sys
from collections.abc import Mapping
from pathlib import Path

from hivebatch.request import PREFIX

REAL_ENV = "HIVEBATCH_REAL_SBATCH"
HSUB_ENV = "HIVEBATCH_HSUB"

# sbatch options that ask for GPUs (besides --gres=gpu…/shard…); read with sbatch's own option table
GPU_OPTIONS = ("gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "mem-per-gpu", "cpus-per-gpu")


def _gres_has_gpu(value: str) -> bool:
    return any(part.strip().split(":")[0] in ("gpu", "shard") for part in value.split(","))


def _asks_for_gpus(seen: dict[str, str | bool]) -> bool:
    gres = seen.get("gres")
    return any(name in seen for name in GPU_OPTIONS) or (isinstance(gres, str) and _gres_has_gpu(gres))


def scan(args: list[str]) -> tuple[bool, bool, int | None]:
    """(asks for GPUs, submitted by hivebatch itself, index of the script argument or None), with
    sbatch's own reading of its command line (abbreviations, values taken from the next word)."""
    from hivebatch.submit.options import parse_args

    parsed = parse_args(args)
    comment = parsed.seen.get("comment")
    own = isinstance(comment, str) and comment.startswith(PREFIX)
    script_at = (
        len(args) - len(parsed.positionals) if parsed.positionals and "wrap" not in parsed.seen else None
    )
    return _asks_for_gpus(parsed.seen), own, script_at


def script_asks_for_gpus(text: str | bytes) -> bool:
    """#SBATCH lines (read exactly as sbatch reads them) asking for GPUs, or any #HSUB line."""
    from hivebatch.submit.script import HSUB_MAGIC, decode_script, directive_words, read_directives

    body = decode_script(text) if isinstance(text, bytes) else text
    return _asks_for_gpus(read_directives(body).seen) or bool(directive_words(body, (HSUB_MAGIC,))[0])


def env_asks_for_gpus(environ: Mapping[str, str]) -> bool:
    from hivebatch.submit.options import parse_env

    return _asks_for_gpus(parse_env(environ).seen)


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
    gpu = gpu or env_asks_for_gpus(os.environ)
    stdin_data: bytes | None = None
    if not gpu and not own:
        if script_at is not None:
            # a missing script is left to the real sbatch, which reports it in its own words
            with contextlib.suppress(OSError):
                gpu = script_asks_for_gpus(Path(args[script_at]).read_bytes())
        elif not any(a == "--wrap" or a.startswith("--wrap=") for a in args) and not sys.stdin.isatty():
            stdin_data = sys.stdin.buffer.read()  # the script comes on standard input: read, then hand on
            gpu = script_asks_for_gpus(stdin_data)
    target = find_hsub() if gpu and not own else [find_real_sbatch()]
    if stdin_data is None:
        os.execv(target[0], [*target, *args])
    import subprocess

    sys.exit(subprocess.run([*target, *args], input=stdin_data).returncode)


if __name__ == "__main__":
    main()
