"""The job script: how hsub reads the user's (its ``#SBATCH`` lines, as sbatch reads them) and the
``hivebatch/templates/job.sh.j2`` wrapper hsub submits around it.

The user's script travels verbatim inside a quoted here-document (no expansion), and every other
value the user typed is put through ``shlex.quote`` (the ``q`` filter), so nothing reaches a shell
unquoted.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from hivebatch import __version__
from hivebatch.errors import HivebatchError
from hivebatch.template_files import TEMPLATE_ENV, template_dir

TEMPLATE_NAME = "job.sh.j2"


def heredoc_delimiter(script: str) -> str:
    """A here-document end marker that no line of the script equals."""
    lines = set(script.splitlines())
    base = "HIVEBATCH_SCRIPT_END"
    candidate, n = base, 0
    while candidate in lines:
        n += 1
        candidate = f"{base}_{n}"
    return candidate


def render_job_script(
    script: str,
    args: list[str],
    vc: str,
    qos: str,
    gpu_mem_mib: int | None = None,
    job_env: dict[str, str] | None = None,
    directives: list[str] | None = None,
    carried_env: dict[str, str] | None = None,
) -> str:
    """``directives``: sbatch options written as ``#SBATCH`` lines, one each; ``carried_env``: variables
    the job gets from the job script (sbatch would have passed them on from the submitting shell)."""
    import jinja2  # only when a script is really generated

    directory = template_dir()
    if not (directory / TEMPLATE_NAME).is_file():
        raise HivebatchError(f"job template {directory / TEMPLATE_NAME} is missing (set {TEMPLATE_ENV})")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # a shell script: quoting is done by the q filter, not HTML escaping
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    body = script[:-1] if script.endswith("\n") else script
    return env.get_template(TEMPLATE_NAME).render(
        version=__version__,
        script=body,
        delimiter=heredoc_delimiter(body),
        args=args,
        vc=vc,
        qos=qos,
        gpu_mem_mib=gpu_mem_mib,
        job_env=dict(sorted((job_env or {}).items())),
        directives=[directive_text(d) for d in directives or []],
        carried_env=dict(sorted((carried_env or {}).items())),
    )


_DIRECTIVE = re.compile(r"^--[a-z-]+=[A-Za-z0-9:@+._-]+$")


def directive_text(option: str) -> str:
    """``option`` as the words of a ``#SBATCH`` line that sbatch reads back as that one word: as it is
    when plain, else double-quoted with ``\\`` and ``"`` escaped (get_argument). It cannot hold a line
    break, which no ``#SBATCH`` line can."""
    if "\n" in option:
        raise ValueError(f"an #SBATCH line cannot hold a line break: {option!r}")
    if _DIRECTIVE.match(option):
        return option
    return '"' + option.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- reading the script's directives exactly as sbatch does (src/sbatch/opt.c _opt_batch_script) ---

MAGIC_WORDS = ("#SBATCH", "#SLURM")  # #SLURM is sbatch's old spelling, still read
HSUB_MAGIC = "#HSUB"  # hivebatch's own lines: a comment to sbatch


def decode_script(data: bytes) -> str:
    """The script as text whatever its encoding, as sbatch reads bytes and never refuses a script for
    it: UTF-8, with any other byte kept as a surrogate (``surrogateescape``), so that the job script,
    sbatch's arguments (a job name) and the environment carry the very bytes the user wrote (seen on
    the lab: a Latin-1 ``echo "café"`` printed UTF-8 under hsub when the script was read as Latin-1)."""
    return data.decode("utf-8", "surrogateescape")


def script_problems(text: str) -> list[str]:
    """What sbatch refuses in any batch script (src/sbatch/sbatch.c _get_script_buffer)."""
    if not text:
        return ["the batch script is empty"]
    if not text.strip():
        return ["the batch script contains only whitespace"]
    if not text.startswith("#!"):
        return ["this does not look like a batch script: its first line must start with #! and an "
                "interpreter, e.g. #!/bin/bash"]  # fmt: skip
    if "\0" in text:
        return ["the batch script contains a NUL character, which Slurm does not allow"]
    if "\r\n" in text:
        return ["the batch script has DOS line breaks (\\r\\n): convert it with dos2unix"]
    return []


def argument_words(line: str) -> tuple[list[str], str | None]:
    """sbatch's get_argument(): words split on blanks, quotes group, a backslash escapes the next
    character, an unescaped ``#`` outside quotes ends the line. Returns (words, problem)."""
    words: list[str] = []
    pos, n = 0, len(line)
    while True:
        while pos < n and line[pos].isspace():
            pos += 1
        if pos >= n:
            return words, None
        if line[pos] == ":":
            return words, f"unexpected ':' in {line!r}"
        word: list[str] = []
        started = False
        quote = ""
        escaped = False
        while pos < n and (quote or not line[pos].isspace()):
            c = line[pos]
            pos += 1
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c in "\"'":
                quote = c
                continue
            elif c == "#":
                pos = n
                break
            word.append(c)
            started = True
        if quote:
            return words, f"unmatched {quote} in {line!r}"
        if not started:
            # an empty word ("" or a lone backslash) is get_argument's NULL: the rest of the line is
            # not read (tests/fixtures/sbatch/jobscripts.json, 24_empty_word.sh)
            return words, None
        words.append("".join(word))


def directive_words(text: str, magic: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The words of every directive line before the first command, in order, and the problems found.

    Like sbatch: a directive starts at the very beginning of a line (an indented ``#SBATCH`` is a plain
    comment) and the magic word needs no blank after it (``#SBATCH--gres=gpu:4`` is read); scanning
    stops at the first line whose first non-blank character is not ``#``.
    """
    words: list[str] = []
    problems: list[str] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        word = next((m for m in magic if line.startswith(m)), None)
        if word is None:
            if line.strip() and not line.lstrip().startswith("#"):
                break  # the first command: sbatch reads no further
            continue
        rest = line[len(word) :].lstrip()
        if rest.split(maxsplit=1)[:1] in (["hetjob"], ["packjob"]):
            problems.append(f"script line {lineno}: heterogeneous jobs (hetjob) are not supported by hsub")
            break
        found, problem = argument_words(line[len(word) :])
        if problem:
            problems.append(f"script line {lineno}: {word} line cannot be read: {problem}")
        words.extend(found)
    return words, problems


def read_directives(script: str | bytes) -> Any:
    """``#SBATCH`` lines parsed together as one command line (as sbatch does: a value may even be on
    the next line), then ``#HSUB`` lines on top of them."""
    from hivebatch.submit.options import Parsed, parse_args

    text = decode_script(script) if isinstance(script, bytes) else script
    merged = Parsed()
    for magic, label in ((MAGIC_WORDS, "#SBATCH"), ((HSUB_MAGIC,), "#HSUB")):
        words, problems = directive_words(text, magic)
        found = parse_args(words, where=f"{label} lines", stop_at_positional=True)
        found.problems[:0] = problems
        if found.positionals:
            found.problems.append(f"{label} lines: invalid directive {found.positionals[0]!r}")
            found.positionals = []
        merged = found.merged_over(merged)
    return merged
