"""From hsub's argv to what is handed to Slurm: the request, the job script and the sbatch arguments.

Everything here is checked before anything reaches Slurm; a problem is one HivebatchError line.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hivebatch.errors import HivebatchError
from hivebatch.request import CLASSES, JobRequest
from hivebatch.slurmconf import SHARD_MIB
from hivebatch.submit.checks import interpret_shape
from hivebatch.submit.options import (
    OPTIONS,
    WRITTEN_BY_BUILD,
    Parsed,
    parse_args,
    parse_directives,
    parse_env,
    problems_error,
    reset_option,
)
from hivebatch.submit.script import decode_script
from hivebatch.submit.timefmt import parse_time_option
from hivebatch.submit.xlate import Translated, translate

# the variables of the options hsub writes itself from what every source said: sbatch must not apply
# them a second time (the others stay, so that sbatch reads them as variables, as it would without hsub)
_ENV_DROPPED = frozenset(var for o in OPTIONS if o.name in WRITTEN_BY_BUILD for var in o.env)
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?$", re.IGNORECASE)


@dataclass
class Submission:
    request: JobRequest
    job_name: str
    script_name: str  # the user's script (or "--wrap")
    user_script: str
    script_args: list[str]
    sbatch_args: list[str]
    env: dict[str, str]
    parsable: bool = False
    quiet: bool = False
    wait: bool = False
    dry_run: bool = False
    test_only: bool = False
    config_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    job_env: dict[str, str] = field(default_factory=dict)  # e.g. a GPU slice's limit (HIVEBATCH_GPU_MEM_*)
    # the job script's #SBATCH lines: the user's script's own options, and --signal (build.SCRIPT_OPTIONS)
    directives: list[str] = field(default_factory=list)
    # the variables hsub keeps from sbatch that sbatch would have passed on to the job (carried_variables)
    carried_env: dict[str, str] = field(default_factory=dict)
    _job_script: str | None = None

    @property
    def attached(self) -> bool:
        """Whether sbatch itself shows the outcome (-Q prints nothing, --wait waits for the job's end)."""
        return self.quiet or self.wait

    def sbatch_command(self) -> list[str]:
        """What hsub runs: sbatch with --parsable (hsub prints the id itself), or, attached, with the
        user's own choice of output."""
        wanted = ["--parsable"] if self.parsable or not self.attached else []
        return ["sbatch", *wanted, *self.sbatch_args]

    def job_script(self) -> str:
        if self._job_script is None:
            from hivebatch.submit.script import render_job_script

            self._job_script = render_job_script(
                self.user_script,
                self.script_args,
                self.request.vc,
                self.request.qos,
                self.request.gpu_mem_mib,
                self.job_env,
                self.directives,
                self.carried_env,
            )
        return self._job_script


def _int(name: str, raw: str | bool | None, minimum: int = 1) -> int | None:
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise HivebatchError(f"--{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise HivebatchError(f"--{name} must be at least {minimum}, got {value}")
    return value


def _typed_count(name: str, raw: str) -> tuple[str | None, int]:
    """``4`` or ``V100:4`` (sbatch's ``--gpus``/``--gpus-per-node`` form)."""
    kind, _, count = raw.rpartition(":")
    n = _int(name, count, minimum=0)
    assert n is not None
    return (kind or None), n


def _gres_gpus(raw: str) -> tuple[str | None, int]:
    parts = raw.strip().split(":")
    if "," in raw or parts[0] != "gpu" or len(parts) > 3:
        raise HivebatchError(
            f"--gres {raw!r}: hsub understands only gpu[:TYPE][:N]; other resources go to sbatch"
        )
    if len(parts) == 1:
        return None, 1
    if len(parts) == 2:
        return (None, _int("gres", parts[1], 0) or 0) if parts[1].isdigit() else (parts[1], 1)
    return parts[1], _int("gres", parts[2], 0) or 0


def parse_size_mib(raw: str) -> int:
    m = _SIZE.match(raw.strip())
    if not m:
        raise HivebatchError(f"--gpu-mem {raw!r} is not a size: use e.g. 8G or 8192M")
    number, unit = float(m.group(1)), (m.group(2) or "M").upper()
    mib = number * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    if mib < 1:
        raise HivebatchError(f"--gpu-mem {raw!r} is too small")
    return int(mib)


def locate_script(name: str, search: str | None) -> Path:
    """Where sbatch finds the script its command line names (src/common/proc_args.c search_path): a
    name starting with ``.`` or ``/`` as it is; any other in the working directory, else in the first
    directory of ``search`` (PATH) that has it, else as it is."""
    if name.startswith((".", "/")):
        return Path(name)
    for directory in [".", *[d for d in (search or "").split(":") if d]]:
        candidate = Path(directory) / name
        if _exists(candidate):
            return candidate
    return Path(name)


def _exists(path: Path) -> bool:
    """proc_args.c _exists: a path stat() reaches that is no directory; a PATH entry the user may not
    search (EACCES: /root/... left in PATH by runuser) is passed over, as sbatch does, not an error."""
    try:
        return not stat.S_ISDIR(path.stat().st_mode)
    except OSError:
        return False


def read_script(
    positionals: list[str],
    wrap: str | None,
    stdin_read: Callable[[], str] | None,
    search: str | None = None,
) -> tuple[str, str, list[str]]:
    """(script text, name, args) from ``SCRIPT ARGS``, ``--wrap CMD`` or standard input; ``search``:
    the PATH a script named without a directory is also looked for in, as sbatch does."""
    if wrap is not None:
        if positionals:
            raise HivebatchError("a script and --wrap cannot be used together")
        return f"#!/bin/sh\n# This script was created by hsub --wrap.\n\n{wrap}\n", "wrap", []
    if positionals:
        path = locate_script(positionals[0], search)
        try:
            text = decode_script(path.read_bytes())
        except FileNotFoundError:
            raise HivebatchError(f"batch script {path} does not exist") from None
        except OSError as exc:
            raise HivebatchError(
                f"cannot read batch script {path}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        text_name = path.name
        script_args = positionals[1:]
    elif stdin_read is not None:
        text, text_name, script_args = stdin_read(), "sbatch", []
    else:
        raise HivebatchError(
            "give a batch script (hsub [options] SCRIPT [ARGS]) or a command (hsub --wrap CMD)"
        )
    if not text.startswith("#!"):
        raise HivebatchError(
            f"{text_name} does not look like a batch script: its first line must start with #! "
            "and an interpreter, e.g. #!/bin/bash"
        )
    return text, text_name, script_args


T = TypeVar("T")


def _guarded(problems: list[str], fn: Callable[[], T], fallback: T) -> T:
    """``fn()``, or ``fallback`` with its error added to ``problems`` (so every mistake is told at once)."""
    try:
        return fn()
    except HivebatchError as exc:
        problems.append(str(exc))
        return fallback


def _account_and_class(
    values: Mapping[str, str | bool], default_vc: str | None, problems: list[str]
) -> tuple[str, str]:
    vc = values.get("account") or default_vc
    if not vc:
        problems.append("say which virtual cluster to use with -A VC (--account), as with sbatch")
    qos = str(values.get("qos") or "normal").strip().lower()
    if qos not in CLASSES:
        problems.append(f"unknown class {qos!r} for -q/--qos: use one of {', '.join(CLASSES)}")
    return str(vc or ""), qos


def _gpu_shape(
    values: Mapping[str, str | bool], problems: list[str]
) -> tuple[int, int | None, int | None, list[str]]:
    """(GPUs, GPUs per node, nodes, GPU types named) from sbatch's ways of asking."""
    types: list[str] = []
    unread: tuple[str | None, int | None] = (None, None)
    nodes = _guarded(problems, lambda: _int("nodes", values.get("nodes")), None)
    gpus: int | None = None
    gpn: int | None = None
    if values.get("gpus") is not None:
        kind, gpus = _guarded(problems, lambda: _typed_count("gpus", str(values["gpus"])), unread)
        types += [kind] if kind else []
    if values.get("gpus_per_node") is not None:
        kind, gpn = _guarded(
            problems, lambda: _typed_count("gpus-per-node", str(values["gpus_per_node"])), unread
        )
        types += [kind] if kind else []
    elif values.get("gres") is not None:
        kind, gpn = _guarded(problems, lambda: _gres_gpus(str(values["gres"])), unread)
        types += [kind] if kind else []
    if values.get("gpu_type"):
        types.append(str(values["gpu_type"]))
    if len({t.lower() for t in types}) > 1:
        problems.append(f"conflicting GPU types {', '.join(sorted(set(types)))}: ask for one")
    if gpus == 0 or gpn == 0:
        problems.append("hsub is for GPU jobs: ask for at least one GPU (submit CPU-only jobs with sbatch)")
        return 1, None, nodes, types
    if gpn is not None:
        if gpus is None:
            # no -N stays none: Slurm spreads the tasks over the nodes they need, as under sbatch
            gpus = (nodes or 1) * gpn
        elif nodes is None:
            if gpus % gpn:
                problems.append(f"--gpus {gpus} is not a multiple of --gpus-per-node {gpn}")
            nodes = max(gpus // gpn, 1)
    elif gpus is None:
        if nodes is not None:
            problems.append("with -N/--nodes also say how many GPUs: --gpus N or --gpus-per-node N")
        gpus = 1
    return gpus, gpn, nodes, types


def _shard_ask(
    values: Mapping[str, str | bool], problems: list[str]
) -> tuple[Mapping[str, str | bool], int | None]:
    """``--gres=shard[:TYPE][:N]``, Slurm's own way to ask for part of a GPU (one shard is 1 GiB of its
    memory), read as one GPU with ``--gpu-mem N``G, which hsub passes to Slurm as that very shard ask."""
    raw = values.get("gres")
    if not isinstance(raw, str) or raw.strip().split(":")[0] != "shard":
        return values, None
    parts = raw.strip().split(":")[1:]
    kind = parts[0] if parts and not parts[0].isdigit() else None
    count = parts[-1] if parts and parts[-1].isdigit() else "1"
    shaped = {k: v for k, v in values.items() if k != "gres"}
    if "," in raw or len(parts) > 2 or (len(parts) == 2 and kind is None) or int(count) < 1:
        problems.append(f"--gres {raw!r}: ask for part of a GPU as shard[:TYPE][:N], e.g. shard:4 (4 GiB)")
        return shaped, None
    if values.get("gpu_mem"):
        problems.append("--gres=shard and --gpu-mem both ask for part of a GPU: give one of them")
    return {**shaped, "gpus": f"{kind}:1" if kind else "1"}, int(count) * SHARD_MIB


def _model_hints(
    values: Mapping[str, str | bool], problems: list[str]
) -> tuple[str | None, str | None, int | None, int | None]:
    model = str(values["model"]) if values.get("model") else None
    like = str(values["like"]) if values.get("like") else None
    batch = _guarded(problems, lambda: _int("batch-size", values.get("batch_size")), None)
    iters = _guarded(problems, lambda: _int("iters", values.get("iters")), None)
    if like and not model:
        problems.append("--like names a known model to borrow a profile from: give --model too")
    if model and (batch is None or iters is None):
        problems.append(
            "--model needs --batch-size and --iters so the placement model can predict the run time"
        )
    if (batch is not None or iters is not None) and not model:
        problems.append("--batch-size and --iters describe a model: give --model too")
    return model, like, batch, iters


def build_request(values: Mapping[str, str | bool], default_vc: str | None = None) -> JobRequest:
    """The JobRequest the options describe (shape arithmetic included), checked on its own; every
    problem found is told at once, as sbatch's own option errors are."""
    problems: list[str] = []
    vc, qos = _account_and_class(values, default_vc, problems)
    values, shard_mib = _shard_ask(values, problems)
    gpus, gpn, nodes, types = _gpu_shape(values, problems)
    time_raw = values.get("time")
    time_limit_s = _guarded(problems, lambda: parse_time_option(str(time_raw)) if time_raw else None, None)
    model, like, batch, iters = _model_hints(values, problems)
    mem = _guarded(
        problems, lambda: parse_size_mib(str(values["gpu_mem"])) if values.get("gpu_mem") else shard_mib, None
    )
    if problems:
        raise problems_error(problems)
    req = JobRequest(
        vc=vc,
        qos=qos,
        gpus=gpus,
        nodes=nodes,
        gpus_per_node=gpn,
        gpu_type=types[0] if types else None,
        within=str(values["within"]) if values.get("within") else None,
        model=model,
        like=like,
        batch_size=batch,
        iters=iters,
        time_limit_s=time_limit_s,
        gpu_mem_mib=mem,
    )
    req.validate()
    return req


def submit_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment sbatch runs with: the user's, without the variables of what hsub writes itself."""
    return {k: v for k, v in environ.items() if k not in _ENV_DROPPED}


def gpu_ask_arguments(req: JobRequest) -> list[str]:
    """The GPU ask in sbatch's own options; Slurm's job_submit plugin turns it into the hivebatch request."""
    kind = f"{req.gpu_type.lower()}:" if req.gpu_type else ""
    if req.gpu_mem_mib and req.gpus == 1 and (req.nodes or 1) == 1:
        # one shard = 1 GiB of one GPU's memory (a slice never spans GPUs); a whole job's --gpu-mem is a hint
        return [f"--gres=shard:{kind}{-(-req.gpu_mem_mib // SHARD_MIB)}"]
    per_node = req.gpus_per_node or (req.gpus // req.nodes if req.nodes else None)
    if per_node:
        return [*([f"--nodes={req.nodes}"] if req.nodes else []), f"--gres=gpu:{kind}{per_node}"]
    return [f"--gpus={kind}{req.gpus}"]


def sbatch_arguments(req: JobRequest, merged: Parsed, command_line: Parsed, name: str) -> list[str]:
    """sbatch's arguments: the GPU ask as Slurm options, account and class only where the user chose them
    (Slurm applies the user's defaults otherwise), hsub's model hints in the comment, then the options of
    the command line hsub passes on as they are. Those of the script stay in the job script and those of
    SBATCH_* variables in the environment: sbatch judges some pairs by where each was given (--mem from
    SBATCH_MEM_PER_NODE gives way to a script's --mem-per-cpu, two on the command line are refused)."""
    values = merged.values
    args = [*gpu_ask_arguments(req), f"--job-name={name}"]
    if "open-mode" not in merged.seen:  # a requeued run keeps the earlier output, unless the user chose
        args.append("--open-mode=append")
    if values.get("account"):
        args.append(f"--account={req.vc}")
    if values.get("qos"):
        args.append(f"--qos={req.qos}")
    if values.get("hold"):
        args.append("--hold")
    # one comment: hsub's hints first (read back by the controller), then whatever the user wrote
    hints = req.hints_comment()
    given = merged.passthrough.get("comment") or []
    user_comment = given[-1].partition("=")[2] if given else ""
    if hints or user_comment:
        args.append(f"--comment={' '.join(x for x in (hints, user_comment) if x)}")
    if values.get("no_requeue"):
        if req.qos == "opportunistic":
            raise HivebatchError(
                "opportunistic jobs must be requeueable (they make way for their VC's owners): drop --no-requeue"
            )
        args.append("--no-requeue")
    else:
        args.append("--requeue")
    for dest, flag in (
        ("time", "--time"),
        ("output", "--output"),
        ("error", "--error"),
        ("mail_user", "--mail-user"),
        ("dependency", "--dependency"),
        ("array", "--array"),
    ):
        if values.get(dest):
            args.append(f"{flag}={values[dest]}")
    args.extend(passed_on(command_line))
    if "\n" in (signal := _signal(merged)):
        args.append(signal)  # no #SBATCH line can hold it; sbatch refuses it anyway
    return args


#: options passed as ``#SBATCH`` lines of the job script whichever source gave them: Slurm 22.05 shows a
#: job's --signal to its job_submit plugin only there (its preemption notice uses it, see hivebatch.notice)
SCRIPT_OPTIONS = ("signal",)


def passed_on(source: Parsed) -> list[str]:
    """The options of one source that hsub passes on as they are, in the order given."""
    keep = []
    for token in source.tokens:
        name = token[2:].partition("=")[0]
        if name not in WRITTEN_BY_BUILD and name not in SCRIPT_OPTIONS and name != "comment":
            keep.append(token)
    return keep


def _signal(merged: Parsed) -> str:
    return next(iter(merged.passthrough.get("signal") or []), "")


def script_directives(merged: Parsed, script: Parsed) -> list[str]:
    """The job script's ``#SBATCH`` lines: the user's script's own options hsub passes on (its
    ``#PBS``/``#BSUB`` lines translated), and the --signal of any source."""
    signal = _signal(merged)
    return [*passed_on(script), *([signal] if signal and "\n" not in signal else [])]


def default_account(user: str | None = None) -> str:
    """The user's default Slurm account, as sbatch would use it without -A."""
    import getpass

    from hivebatch.slurm import SlurmError, get_backend

    who = user or getpass.getuser()
    try:
        account = get_backend().default_account(who)
    except SlurmError as exc:
        raise HivebatchError(f"cannot read your default account from Slurm ({exc}); give -A VC") from None
    if not account:
        raise HivebatchError(f"Slurm has no default account for {who}: give -A VC (your virtual cluster)")
    return account


@dataclass
class Sources:
    """The script's options (which stay in the job script) and every source merged as sbatch ranks them."""

    script: Parsed  # #SBATCH (and #HSUB) lines, with the #PBS or #BSUB lines translated over them
    merged: Parsed
    translated: Translated


def read_sources(cmd: Parsed, text: str, environ: Mapping[str, str]) -> Sources:
    script = parse_directives(text)
    env = parse_env(environ)
    ignore_pbs = any(source.seen.get("ignore-pbs") for source in (cmd, env, script))
    translated = Translated() if ignore_pbs else translate(text, script.seen)
    if translated.kind:
        # read after the #SBATCH lines (so over them) and below the variables, as sbatch does
        wrapper = parse_args(translated.words)
        wrapper.problems[:0] = translated.problems
        script = wrapper.merged_over(script)
    merged = cmd.merged_over(env.merged_over(script))
    _one_memory_option(merged, cmd, env)
    return Sources(script, merged, translated)


_MEMORY = ("mem", "mem-per-cpu", "mem-per-gpu")


def _one_memory_option(merged: Parsed, cmd: Parsed, env: Parsed) -> None:
    """sbatch's _validate_memory_options: of --mem, --mem-per-cpu and --mem-per-gpu, one given as an
    option (command line or script) wins over the others' variables; two given as options, or two
    variables, are refused."""
    from_env = {n for n in _MEMORY if merged.seen.get(n) and n in env.seen and n not in cmd.seen}
    options = [n for n in _MEMORY if merged.seen.get(n) and n not in from_env]
    if len(options) > 1:
        merged.problems.append("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    elif options:
        for name in from_env:
            reset_option(merged, name)
    elif len(from_env) > 1:
        merged.problems.append(
            "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are mutually exclusive."
        )


def prepare(
    argv: list[str],
    environ: Mapping[str, str] | None = None,
    stdin_read: Callable[[], str] | None = None,
    check_config: bool = True,
    default_vc: str | None = None,
) -> Submission:
    """Parse, read the script, merge option sources, build and check the request."""
    environ = os.environ if environ is None else environ
    cmd = parse_args(argv)
    # sbatch stops at a command line it cannot read before it reads the script (from stdin, maybe)
    cmd.raise_problems()
    wrap = cmd.values.get("wrap")
    text, script_name, script_args = read_script(
        cmd.positionals, str(wrap) if isinstance(wrap, str) else None, stdin_read, environ.get("PATH")
    )
    sources = read_sources(cmd, text, environ)
    merged, translated = sources.merged, sources.translated
    values, problems = interpret_shape(merged.values)
    merged.problems += problems
    merged.raise_problems()
    if default_vc is None and check_config and not values.get("account"):
        default_vc = default_account()
    req = build_request(values, default_vc)
    name = str(values.get("job_name") or script_name)
    sub = Submission(
        request=req,
        job_name=name,
        script_name="--wrap" if wrap is not None else script_name,
        user_script=text,
        script_args=script_args,
        sbatch_args=[],
        env=submit_env(environ),
        parsable=bool(values.get("parsable")),
        quiet=bool(values.get("quiet")),
        wait=bool(values.get("wait")),
        dry_run=bool(values.get("dry_run")),
        test_only=bool(values.get("test_only")),
    )
    if check_config:
        from hivebatch.config import load_config
        from hivebatch.submit.checks import check_request

        explicit = values.get("config")
        sub.config_path, sub.config = load_config(str(explicit) if explicit else None)
        sub.request, sub.notes, sub.job_env = check_request(req, sub.config, sub.config_path)
    merged.values = values
    sub.sbatch_args = sbatch_arguments(sub.request, merged, cmd, name)
    sub.directives = script_directives(merged, sources.script)
    if _signal(merged):
        # hsub merged it already (command line over environment over script); in the environment it
        # would override the directive, which sbatch ranks lowest
        sub.env.pop("SBATCH_SIGNAL", None)
    sub.carried_env = carried_variables(
        {k: v for k, v in environ.items() if k not in sub.env}, merged.seen.get("export")
    )
    if translated.kind:
        # the job script holds the user's script, #PBS/#BSUB lines too: sbatch must not read them again
        sub.sbatch_args.append("--ignore-pbs")
        if translated.umask is not None and "SLURM_UMASK" not in environ:
            sub.env["SLURM_UMASK"] = f"0{translated.umask:03o}"  # what sbatch sets from -W umask=
    return sub


_EXPORT_ITEM = re.compile(r"""(?:[^,"']|"[^"]*"|'[^']*')+""")


def carried_variables(removed: Mapping[str, str], export: str | bool | None) -> dict[str, str]:
    """Of the variables hsub keeps from sbatch (it writes their options itself), those sbatch would have
    passed on to the job (src/common/env.c env_merge_filter): seen on the lab, a job got SBATCH_ACCOUNT
    and SBATCH_TIMELIMIT from sbatch but not from hsub, so an sbatch inside the job read other defaults.
    All of them unless --export says otherwise: none with NONE, those named in a list without ALL."""
    if not isinstance(export, str) or export.upper() == "ALL":
        return dict(removed)
    items = _EXPORT_ITEM.findall(export)
    if export.upper() == "NONE" or not items:
        return {}
    if any(item.upper() == "ALL" for item in items):
        return dict(removed)
    return {name: value for name, value in removed.items() if name in items}


def stdin_reader() -> Callable[[], str] | None:
    """Read the script from standard input when it is not a terminal, as sbatch does."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return lambda: decode_script(sys.stdin.buffer.read())
