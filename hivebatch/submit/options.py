"""sbatch-style options for hsub: one table read by the command line, ``#SBATCH``/``#HSUB`` lines and env.

Precedence is sbatch's: the command line beats ``SBATCH_*`` environment variables, which beat the
directives in the script. Options hivebatch handles itself are parsed into values; a list of harmless
sbatch options (memory, CPUs, partition, …) is passed to sbatch as typed; options that would fight
hivebatch's placement (``--nodelist``, ``--comment``, …) are refused with the reason.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hivebatch.errors import HivebatchError

# kinds: "value" (hsub uses it), "flag" (hsub uses it, no argument),
#        "pass" (handed to sbatch unchanged), "passflag" (same, no argument), "refuse"


@dataclass(frozen=True)
class Opt:
    dest: str
    kind: str
    short: str | None = None
    long: tuple[str, ...] = ()
    help: str = ""
    metavar: str = "VALUE"
    env: str | None = None
    why: str = ""  # for refused options


OPTIONS: tuple[Opt, ...] = (
    # what hivebatch needs to know
    Opt(
        "account",
        "value",
        "A",
        ("account",),
        "virtual cluster (Slurm account) to run in",
        "VC",
        "SBATCH_ACCOUNT",
    ),
    Opt(
        "qos",
        "value",
        "q",
        ("qos",),
        "class: urgent, prior, normal (default) or opportunistic",
        "CLASS",
        "SBATCH_QOS",
    ),
    Opt("job_name", "value", "J", ("job-name",), "job name", "NAME", "SBATCH_JOB_NAME"),
    Opt("time", "value", "t", ("time",), "time limit: MM, HH:MM:SS, D-HH:MM …", "TIME", "SBATCH_TIMELIMIT"),
    Opt(
        "output",
        "value",
        "o",
        ("output",),
        "stdout file pattern (appended to when requeued)",
        "FILE",
        "SBATCH_OUTPUT",
    ),
    Opt("error", "value", "e", ("error",), "stderr file pattern", "FILE", "SBATCH_ERROR"),
    Opt("nodes", "value", "N", ("nodes",), "number of nodes (default: chosen by the placement model)", "N"),
    Opt(
        "gpus",
        "value",
        "G",
        ("gpus",),
        "GPUs in total, optionally typed: 4 or V100:4 (default 1)",
        "[TYPE:]N",
        "SBATCH_GPUS",
    ),
    Opt(
        "gpus_per_node",
        "value",
        None,
        ("gpus-per-node",),
        "GPUs on each node",
        "[TYPE:]N",
        "SBATCH_GPUS_PER_NODE",
    ),
    Opt(
        "gres",
        "value",
        None,
        ("gres",),
        "gpu[:TYPE]:N, same as --gpus-per-node",
        "gpu[:TYPE]:N",
        "SBATCH_GRES",
    ),
    Opt("mail_type", "value", None, ("mail-type",), "mail events (BEGIN, END, FAIL, ALL …)", "TYPE"),
    Opt("mail_user", "value", None, ("mail-user",), "mail address", "USER"),
    Opt("dependency", "value", "d", ("dependency",), "start after other jobs, e.g. afterok:123", "DEP"),
    Opt("array", "value", "a", ("array",), "job array indices, e.g. 0-9%2", "INDEXES", "SBATCH_ARRAY_INX"),
    Opt("parsable", "flag", None, ("parsable",), "print only the job id"),
    Opt("wrap", "value", None, ("wrap",), "run this shell command instead of a script", "CMD"),
    Opt("requeue", "flag", None, ("requeue",), "allow the job to be requeued (the default)"),
    Opt("no_requeue", "flag", None, ("no-requeue",), "do not requeue (not allowed for opportunistic jobs)"),
    Opt("hold", "flag", "H", ("hold",), "accepted for compatibility: hsub always submits held"),
    # hivebatch's own (also as #HSUB lines)
    Opt("model", "value", None, ("model",), "model type for the placement model, e.g. resnet50", "NAME"),
    Opt("batch_size", "value", None, ("batch-size",), "global batch size", "N"),
    Opt("iters", "value", None, ("iters",), "training iterations", "N"),
    Opt("like", "value", None, ("like",), "known model to borrow a profile from (for a new model)", "NAME"),
    Opt("gpu_type", "value", None, ("gpu-type",), "GPU type, e.g. V100 (default: any with room)", "TYPE"),
    Opt("within", "value", None, ("within",), "keep the job inside one cell of this type", "CELLTYPE"),
    Opt(
        "gpu_mem", "value", None, ("gpu-mem",), "GPU memory needed per GPU (e.g. 8G): may share a GPU", "SIZE"
    ),
    Opt(
        "dry_run", "flag", None, ("dry-run",), "print the generated script and sbatch command, submit nothing"
    ),
    Opt(
        "test_only",
        "flag",
        None,
        ("test-only",),
        "print where and when the job would start now, submit nothing",
    ),
    Opt("config", "value", None, ("config",), "hivebatch configuration file", "FILE"),
    Opt("help", "flag", "h", ("help",), "show this help"),
    Opt("version", "flag", "V", ("version",), "show the version"),
    # handed to sbatch as typed
    Opt("partition", "pass", "p", ("partition",), env="SBATCH_PARTITION"),
    Opt("cpus_per_task", "pass", "c", ("cpus-per-task",)),
    Opt("ntasks", "pass", "n", ("ntasks",)),
    Opt("ntasks_per_node", "pass", None, ("ntasks-per-node",)),
    Opt("mem", "pass", None, ("mem",), env="SBATCH_MEM_PER_NODE"),
    Opt("mem_per_cpu", "pass", None, ("mem-per-cpu",), env="SBATCH_MEM_PER_CPU"),
    Opt("chdir", "pass", "D", ("chdir",)),
    Opt("export", "pass", None, ("export",), env="SBATCH_EXPORT"),
    Opt("export_file", "pass", None, ("export-file",)),
    Opt("signal", "pass", None, ("signal",), env="SBATCH_SIGNAL"),
    Opt("begin", "pass", "b", ("begin",)),
    Opt("nice", "pass", None, ("nice",)),
    Opt("input", "pass", "i", ("input",), env="SBATCH_INPUT"),
    Opt("licenses", "pass", "L", ("licenses",)),
    Opt("constraint", "pass", "C", ("constraint",), env="SBATCH_CONSTRAINT"),
    Opt("comment_user", "refuse", None, ("comment",), why="hivebatch keeps the job's request in its comment"),
    Opt("nodelist", "refuse", "w", ("nodelist",), why="hivebatch chooses the nodes; ask for a count with -N"),
    Opt("exclude", "refuse", "x", ("exclude",), why="hivebatch chooses the nodes and avoids bad ones itself"),
    Opt("gpus_per_task", "refuse", None, ("gpus-per-task",), why="ask for --gpus or --gpus-per-node instead"),
    Opt("mem_per_gpu", "refuse", None, ("mem-per-gpu",), why="use --mem, or --gpu-mem for GPU memory"),
    Opt("cpus_per_gpu", "refuse", None, ("cpus-per-gpu",), why="use --cpus-per-task"),
    Opt(
        "open_mode",
        "refuse",
        None,
        ("open-mode",),
        why="hivebatch always appends, so a requeued run keeps the first run's output",
    ),
    Opt("uid", "refuse", None, ("uid",), why="jobs run as the user who submits them"),
    Opt("clusters", "refuse", "M", ("clusters",), why="hivebatch manages one cluster"),
    Opt("wait", "passflag", "W", ("wait",), "wait for the job to end (sbatch --wait)"),
    Opt(
        "exclusive",
        "refuse",
        None,
        ("exclusive",),
        why="hivebatch gives whole cells; ask for a node's GPUs instead",
    ),
)

BY_LONG: dict[str, Opt] = {name: o for o in OPTIONS for name in o.long}
BY_SHORT: dict[str, Opt] = {o.short: o for o in OPTIONS if o.short}
NO_ARG = ("flag", "passflag")


@dataclass
class Parsed:
    """Options from one source; ``passthrough`` keeps sbatch's own spelling, last one per option wins."""

    values: dict[str, str | bool] = field(default_factory=dict)
    passthrough: dict[str, list[str]] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)

    def merged_over(self, lower: Parsed) -> Parsed:
        """This source's options on top of ``lower``'s (``lower`` loses on every option both set)."""
        return Parsed(
            {**lower.values, **self.values}, {**lower.passthrough, **self.passthrough}, self.positionals
        )


def _store(parsed: Parsed, opt: Opt, spelled: str, value: str | None) -> None:
    if opt.kind == "refuse":
        raise HivebatchError(f"{spelled} is not accepted by hsub: {opt.why}")
    if opt.kind == "flag":
        parsed.values[opt.dest] = True
    elif opt.kind == "value":
        assert value is not None
        parsed.values[opt.dest] = value
    elif opt.kind == "passflag":
        parsed.passthrough[opt.dest] = [f"--{opt.long[0]}"]
    else:
        assert value is not None
        parsed.passthrough[opt.dest] = [f"--{opt.long[0]}={value}"]


def parse_args(args: Iterable[str], where: str = "", stop_at_positional: bool = True) -> Parsed:
    """getopt-style parsing: ``-N2``, ``-N 2``, ``--nodes=2``, ``--nodes 2``; stops at the script name."""
    parsed = Parsed()
    tokens = list(args)
    prefix = f"{where}: " if where else ""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            parsed.positionals.extend(tokens[i:])
            break
        if tok.startswith("--") and len(tok) > 2:
            name, eq, inline = tok[2:].partition("=")
            opt = BY_LONG.get(name)
            if opt is None:
                raise HivebatchError(f"{prefix}unknown option --{name} (see hsub --help)")
            if opt.kind == "refuse":
                _store(parsed, opt, f"--{name}", None)
            if opt.kind in NO_ARG:
                if eq:
                    raise HivebatchError(f"{prefix}--{name} takes no value")
                _store(parsed, opt, f"--{name}", None)
                continue
            if eq:
                value = inline
            elif i < len(tokens):
                value = tokens[i]
                i += 1
            else:
                raise HivebatchError(f"{prefix}--{name} needs a value ({opt.metavar})")
            _store(parsed, opt, f"--{name}", value)
            continue
        if tok.startswith("-") and len(tok) > 1:
            letter = tok[1]
            opt = BY_SHORT.get(letter)
            if opt is None:
                raise HivebatchError(f"{prefix}unknown option -{letter} (see hsub --help)")
            if opt.kind == "refuse":
                _store(parsed, opt, f"-{letter}", None)
            if opt.kind in NO_ARG:
                if len(tok) > 2:
                    raise HivebatchError(f"{prefix}-{letter} takes no value")
                _store(parsed, opt, f"-{letter}", None)
                continue
            if len(tok) > 2:
                value = tok[2:]
            elif i < len(tokens):
                value = tokens[i]
                i += 1
            else:
                raise HivebatchError(f"{prefix}-{letter} needs a value ({opt.metavar})")
            _store(parsed, opt, f"-{letter}", value)
            continue
        parsed.positionals.append(tok)
        if stop_at_positional:
            parsed.positionals.extend(tokens[i:])
            break
    return parsed


DIRECTIVE_PREFIXES = ("#SBATCH", "#HSUB")


def parse_directives(script: str) -> Parsed:
    """``#SBATCH``/``#HSUB`` lines before the first command, as sbatch reads them (later lines win)."""
    parsed = Parsed()
    for lineno, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if lineno == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # sbatch stops reading directives at the first command
        for prefix in DIRECTIVE_PREFIXES:
            if stripped.startswith(prefix) and (
                len(stripped) == len(prefix) or stripped[len(prefix)].isspace()
            ):
                try:
                    words = shlex.split(stripped[len(prefix) :], comments=True)
                except ValueError as exc:
                    raise HivebatchError(
                        f"script line {lineno}: {prefix} line cannot be read: {exc}"
                    ) from None
                found = parse_args(words, where=f"script line {lineno}", stop_at_positional=False)
                if found.positionals:
                    raise HivebatchError(
                        f"script line {lineno}: unexpected {found.positionals[0]!r} in {prefix} line"
                    )
                parsed = found.merged_over(parsed)
                break
    return parsed


def parse_env(environ: Mapping[str, str]) -> Parsed:
    """The ``SBATCH_*`` input variables sbatch itself honours, for the options hsub knows."""
    parsed = Parsed()
    for opt in OPTIONS:
        if opt.env and environ.get(opt.env):
            _store(parsed, opt, opt.env, environ[opt.env])
    return parsed


def consumed_env_names() -> set[str]:
    """Variables hsub reads itself: they are not handed on to sbatch, which would apply them again."""
    return {o.env for o in OPTIONS if o.env and o.kind in ("value", "flag")}


def help_text() -> str:
    lines = [
        "Usage: hsub [OPTIONS] SCRIPT [ARGS...]",
        "       hsub [OPTIONS] --wrap CMD",
        "",
        "Submit a GPU job through hivebatch. Options follow sbatch and may also be given as #SBATCH",
        "lines in the script (hivebatch's own also as #HSUB lines); the command line wins over SBATCH_*",
        "variables, which win over the script's lines. The job is submitted held; the hivebatch",
        "controller picks its nodes and exact GPUs and releases it.",
        "",
    ]
    for title, kinds in (
        ("Options", ("value", "flag")),
        ("Passed to sbatch unchanged", ("pass", "passflag")),
    ):
        lines.append(f"{title}:")
        for o in OPTIONS:
            if o.kind not in kinds:
                continue
            names = ", ".join(([f"-{o.short}"] if o.short else []) + [f"--{n}" for n in o.long])
            if o.kind in ("value",):
                names += f" {o.metavar}"
            if o.kind in ("pass",):
                names += " VALUE"
            lines.append(f"  {names:<30} {o.help}".rstrip())
        lines.append("")
    refused = ", ".join(f"--{o.long[0]}" for o in OPTIONS if o.kind == "refuse")
    lines.append(f"Not accepted (hivebatch decides these): {refused}")
    return "\n".join(lines)
