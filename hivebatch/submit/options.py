"""hsub's options: sbatch 22.05's own table plus hivebatch's, read the way sbatch reads them.

sbatch parses its command line, its ``#SBATCH`` lines and its ``SBATCH_*`` variables with glibc's
``getopt_long`` over one option table (src/common/slurm_opt.c, options string starting with ``+``):
unique abbreviations of long names are accepted, a required value may be the next word whatever it
looks like (``-J --dry-run`` names the job "--dry-run"), short flags may be bundled (``-Hv``) and
parsing stops at the first word that is not an option (the script). hsub reproduces that here so that
whatever sbatch accepts, hsub accepts and hands on unchanged: sbatch stays the judge of its own
options. Precedence is sbatch's: the command line beats ``SBATCH_*`` variables, which beat the
directives in the script. hsub reads the values of a few options (the VC, the class, the GPU ask, …);
every problem is collected so the user sees all of them at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hivebatch.errors import HivebatchError
from hivebatch.getopt import NO_ARG, OPTIONAL, REQUIRED, Found, Spec, Table, getopt
from hivebatch.strtol import strtol

# sbatch 22.05's long options (``name=`` takes a value, ``name[=]`` an optional one, ``/X`` is the
# short letter), in slurm_opt.c's table order: glibc resolves abbreviations in this order.
_SBATCH_TABLE = """
account=/A acctg-freq= array=/a batch= begin=/b bb= bbf= cluster-constraint= chdir=/D cluster=
clusters=/M comment= container= context= contiguous constraint=/C core-spec=/S cores-per-socket=
cpu-freq= cpus-per-gpu= cpus-per-task=/c deadline= delay-boot= dependency=/d distribution=/m error=/e
exclude=/x exclusive[=] export= export-file= extra-node-info=/B get-user-env[=] gid= gpu-bind= gpu-freq=
gpus=/G gpus-per-node= gpus-per-socket= gpus-per-task= gres= gres-flags= help/h hint= hold/H ignore-pbs
input=/i job-name=/J kill-on-invalid-dep= licenses=/L mail-type= mail-user= mcs-label= mem= mem-bind=
mem-per-cpu= mem-per-gpu= mincpus= network= nice[=] no-kill[=]/k no-requeue nodefile=/F nodelist=/w
nodes=/N ntasks=/n ntasks-per-core= ntasks-per-gpu= ntasks-per-node= ntasks-per-socket= ntasks-per-tres=
open-mode= output=/o overcommit/O oversubscribe/s parsable partition=/p power= prefer= priority=
profile= propagate[=] qos=/q quiet/Q reboot requeue reservation= signal= sockets-per-node= spread-job
switches= tasks-per-node= test-only thread-spec= threads-per-core= time=/t time-min= tmp= uid=
use-min-nodes verbose/v version/V usage wait/W wait-all-nodes= wckey= wrap=
"""

# long names that are the same option as another (same getopt value): sbatch reports the first
ALIASES = {"tasks-per-node": "ntasks-per-node"}

# sbatch's input variables (src/sbatch/opt.c env_vars[]) and the option each one sets
_ENV_TABLE = """
SBATCH_ACCOUNT account SBATCH_ARRAY_INX array SBATCH_ACCTG_FREQ acctg-freq SBATCH_BATCH batch
SBATCH_BURST_BUFFER bb SBATCH_CLUSTER_CONSTRAINT cluster-constraint SBATCH_CLUSTERS clusters
SLURM_CLUSTERS clusters SBATCH_CONTAINER container SBATCH_CONSTRAINT constraint SBATCH_CORE_SPEC core-spec
SBATCH_CPU_FREQ_REQ cpu-freq SBATCH_CPUS_PER_GPU cpus-per-gpu SBATCH_DEBUG verbose
SBATCH_DELAY_BOOT delay-boot SBATCH_DISTRIBUTION distribution SBATCH_EXCLUSIVE exclusive
SBATCH_EXPORT export SBATCH_GET_USER_ENV get-user-env SBATCH_GRES gres SBATCH_GRES_FLAGS gres-flags
SBATCH_GPUS gpus SBATCH_GPU_BIND gpu-bind SBATCH_GPU_FREQ gpu-freq SBATCH_GPUS_PER_NODE gpus-per-node
SBATCH_GPUS_PER_SOCKET gpus-per-socket SBATCH_GPUS_PER_TASK gpus-per-task SLURM_HINT hint
SBATCH_HINT hint SBATCH_JOB_NAME job-name SBATCH_MEM_BIND mem-bind SBATCH_MEM_PER_CPU mem-per-cpu
SBATCH_MEM_PER_GPU mem-per-gpu SBATCH_MEM_PER_NODE mem SBATCH_NETWORK network SBATCH_NO_KILL no-kill
SBATCH_NO_REQUEUE no-requeue SBATCH_OPEN_MODE open-mode SBATCH_OVERCOMMIT overcommit
SBATCH_PARTITION partition SBATCH_POWER power SBATCH_PROFILE profile SBATCH_QOS qos
SBATCH_REQ_SWITCH switches SBATCH_REQUEUE requeue SBATCH_RESERVATION reservation SBATCH_SIGNAL signal
SBATCH_SPREAD_JOB spread-job SBATCH_THREAD_SPEC thread-spec SBATCH_THREADS_PER_CORE threads-per-core
SBATCH_TIMELIMIT time SBATCH_USE_MIN_NODES use-min-nodes SBATCH_WAIT wait
SBATCH_WAIT_ALL_NODES wait-all-nodes SBATCH_WCKEY wckey SBATCH_ERROR error SBATCH_INPUT input
SBATCH_OUTPUT output SBATCH_IGNORE_PBS ignore-pbs
"""

# hivebatch's own options (also as #HSUB lines): name, takes a value, metavar, help
_HSUB_OWN = (
    ("model", True, "NAME", "model type for the placement model, e.g. resnet50"),
    ("batch-size", True, "N", "global batch size"),
    ("iters", True, "N", "training iterations"),
    ("like", True, "NAME", "known model to borrow a profile from (for a new model)"),
    ("gpu-type", True, "TYPE", "GPU type, e.g. V100 (default: any with room)"),
    ("within", True, "CELLTYPE", "keep the job inside one cell of this type"),
    ("gpu-mem", True, "SIZE", "GPU memory needed per GPU (e.g. 8G): may share a GPU"),
    ("dry-run", False, "", "print the generated script and sbatch command, submit nothing"),
    ("config", True, "FILE", "hivebatch configuration file"),
)

# sbatch options whose values hsub reads (the rest only pass through); help for the ones it shows
READ_BY_HSUB: dict[str, str] = {
    "account": "virtual cluster (Slurm account) to run in",
    "qos": "class: urgent, prior, normal (default) or opportunistic",
    "job-name": "job name",
    "time": "time limit: MM, HH:MM:SS, D-HH:MM …",
    "output": "stdout file pattern",
    "error": "stderr file pattern",
    "nodes": "number of nodes (default: chosen by the placement model)",
    "gpus": "GPUs in total, optionally typed: 4 or V100:4 (default 1)",
    "gpus-per-node": "GPUs on each node",
    "gres": "gpu[:TYPE]:N, same as --gpus-per-node",
    "gpus-per-task": "GPUs for each task (with -n/--ntasks)",
    "mem-per-gpu": "memory per GPU",
    "cpus-per-gpu": "CPUs per GPU",
    "exclusive": "whole nodes",
    "ntasks": "tasks",
    "ntasks-per-node": "tasks on each node",
    "mail-type": "mail events (BEGIN, END, FAIL, ALL …)",
    "mail-user": "mail address",
    "dependency": "start after other jobs, e.g. afterok:123",
    "array": "job array indices, e.g. 0-9%2",
    "parsable": "print only the job id",
    "quiet": "print no job id, only errors",
    "wait": "wait for the job to end, then exit with its exit code",
    "wrap": "run this shell command instead of a script",
    "requeue": "allow the job to be requeued",
    "no-requeue": "do not requeue (not allowed for opportunistic jobs)",
    "hold": "submit held",
    "test-only": "print where and when the job would start now, submit nothing",
    "help": "show this help",
    "usage": "show this help",
    "version": "show the version",
}
# what build.py adds to sbatch's arguments itself from the values (so they are not passed twice)
WRITTEN_BY_BUILD = frozenset(
    [
        "account",
        "qos",
        "job-name",
        "time",
        "output",
        "error",
        "mail-user",
        "dependency",
        "array",
        "parsable",
        "wrap",
        "requeue",
        "no-requeue",
        "hold",
        "test-only",
        "help",
        "usage",
        "version",
        "gpus",
        "gpus-per-node",
        "gres",
    ]
)


@dataclass(frozen=True)
class Opt:
    name: str  # the long name (the first of its aliases)
    arg: int = NO_ARG
    short: str | None = None
    sbatch: bool = True  # False: hivebatch's own, never given to sbatch
    help: str = ""
    metavar: str = "VALUE"
    env: tuple[str, ...] = ()  # SBATCH_* variables setting it

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def long(self) -> tuple[str, ...]:
        return (self.name, *[a for a, canon in ALIASES.items() if canon == self.name])

    @property
    def read(self) -> bool:
        return not self.sbatch or self.name in READ_BY_HSUB


def _table() -> tuple[Opt, ...]:
    envs: dict[str, list[str]] = {}
    words = _ENV_TABLE.split()
    for var, name in zip(words[::2], words[1::2], strict=True):
        envs.setdefault(name, []).append(var)
    out = []
    for word in _SBATCH_TABLE.split():
        spec, _, short = word.partition("/")
        name = spec.removesuffix("[=]").removesuffix("=")
        arg = OPTIONAL if spec.endswith("[=]") else REQUIRED if spec.endswith("=") else NO_ARG
        if name in ALIASES:
            continue
        out.append(
            Opt(name, arg, short or None, True, READ_BY_HSUB.get(name, ""), env=tuple(envs.get(name, ())))
        )
    for name, takes, metavar, text in _HSUB_OWN:
        out.append(Opt(name, REQUIRED if takes else NO_ARG, None, False, text, metavar))
    return tuple(out)


OPTIONS: tuple[Opt, ...] = _table()
BY_LONG: dict[str, Opt] = {n: o for o in OPTIONS for n in o.long}
BY_SHORT: dict[str, Opt] = {o.short: o for o in OPTIONS if o.short}
# getopt's table order, aliases in place, for abbreviations: sbatch's names first, then hivebatch's
_SBATCH_NAMES = tuple(
    w.partition("/")[0].removesuffix("[=]").removesuffix("=") for w in _SBATCH_TABLE.split()
)


@dataclass
class Parsed:
    """Options from one source.

    ``values``: what hsub reads, by dest (``job_name``), last one wins. ``passthrough``: the sbatch
    options hsub does not write itself, in sbatch's canonical spelling, last one per option wins.
    ``tokens``: every sbatch option of this source in order, canonical spelling (what sbatch would see).
    ``problems``: every option error found, each one line.
    """

    values: dict[str, str | bool] = field(default_factory=dict)
    passthrough: dict[str, list[str]] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seen: dict[str, str | bool] = field(default_factory=dict)  # every option by long name, last wins

    def merged_over(self, lower: Parsed) -> Parsed:
        """This source's options on top of ``lower``'s (``lower`` loses on every option both set, but
        for those whose values add up)."""
        merged = Parsed(
            {**lower.values, **self.values},
            {**lower.passthrough, **self.passthrough},
            self.positionals,
            [*lower.tokens, *self.tokens],
            [*lower.problems, *self.problems],
            {**lower.seen, **self.seen},
        )
        for name in ADDS_UP:
            both = [str(p.seen[name]) for p in (lower, self) if isinstance(p.seen.get(name), str)]
            if len(both) == 2:
                merged.seen[name] = ",".join(both)
                if BY_LONG[name].read:
                    merged.values[BY_LONG[name].dest] = merged.seen[name]
        return merged

    def raise_problems(self) -> None:
        if self.problems:
            raise problems_error(self.problems)


def problems_error(problems: list[str]) -> HivebatchError:
    """One error for every problem found: the line itself, or ``N problems:`` and one line each."""
    if len(problems) == 1:
        return HivebatchError(problems[0])
    return HivebatchError(f"{len(problems)} problems:\n  " + "\n  ".join(problems))


#: options that set one field in sbatch (slurm_opt.c): the last one given, or reset, decides for both
_SAME_FIELD = {"requeue": "no-requeue", "no-requeue": "requeue", "exclusive": "oversubscribe",
               "oversubscribe": "exclusive"}  # fmt: skip


#: options whose every value counts: sbatch ORs each --mail-type into the last (slurm_opt.c
#: arg_set_mail_type), so three lines BEGIN, END and FAIL ask for all three (and NONE clears nothing)
ADDS_UP = ("mail-type",)


def _store(parsed: Parsed, opt: Opt, value: str | None) -> None:
    stored: str | bool = True if value is None else value
    if opt.name in ADDS_UP and isinstance(before := parsed.seen.get(opt.name), str) and value is not None:
        stored = f"{before},{value}"
    if opt.name in _SAME_FIELD:
        _reset(parsed, BY_LONG[_SAME_FIELD[opt.name]], direct=False)
    parsed.seen[opt.name] = stored
    if opt.read:
        parsed.values[opt.dest] = stored
    if not opt.sbatch:
        return
    token = f"--{opt.name}" if value is None else f"--{opt.name}={value}"
    parsed.tokens.append(token)
    if opt.name not in WRITTEN_BY_BUILD:
        parsed.passthrough[opt.dest] = [token]


def reset_option(parsed: Parsed, name: str) -> None:
    """The option named as never given in ``parsed``, as sbatch resets it."""
    _reset(parsed, BY_LONG[name])


def _reset(parsed: Parsed, opt: Opt, direct: bool = True) -> None:
    """The option as never given (False overrides a lower source's value when merged); its variable
    stays in sbatch's environment, which resets it there too. Resetting one option of a shared field
    resets the field: the other option's value, though sbatch still lists it as given."""
    if direct:
        parsed.seen[opt.name] = False
    if opt.read:
        parsed.values[opt.dest] = False
    if opt.sbatch and opt.name not in WRITTEN_BY_BUILD:
        parsed.passthrough[opt.dest] = []
    if direct and opt.name in _SAME_FIELD:
        _reset(parsed, BY_LONG[_SAME_FIELD[opt.name]], direct=False)


def _getopt_table() -> Table:
    specs = {o.name: Spec(o.name, o.arg) for o in OPTIONS}
    return Table(
        longs=tuple((n, specs[ALIASES.get(n, n)]) for n in _SBATCH_NAMES),
        shorts={o.short: specs[o.name] for o in OPTIONS if o.short},
        own=tuple((o.name, specs[o.name]) for o in OPTIONS if not o.sbatch),
    )


TABLE = _getopt_table()


def parse_args(args: Iterable[str], where: str = "", stop_at_positional: bool = True) -> Parsed:
    """sbatch's getopt_long (``+``: stops at the first word that is not an option, the script)."""
    parsed = Parsed()
    for item in getopt(list(args), TABLE, stop_at_positional):
        if isinstance(item, Found):
            _store(parsed, BY_LONG[item.spec.name], item.value)
        elif isinstance(item, str):
            parsed.problems.append(f"{where}: {item}" if where else item)
        else:
            parsed.positionals.extend(item)
    return parsed


def parse_env(environ: Mapping[str, str]) -> Parsed:
    """The ``SBATCH_*`` input variables, as sbatch applies them. A flag's variable sets the flag when it
    is empty, ``yes`` or a number other than 0; any other value resets it, undoing a ``#SBATCH`` line
    (slurm_opt.c slurm_process_option; recorded: tests/fixtures/sbatch/jobscripts.json, env-flag-*)."""
    parsed = Parsed()
    for opt in OPTIONS:
        for var in opt.env:
            if var in environ:
                value = environ[var]
                if opt.arg == NO_ARG and not env_flag_set(value):
                    _reset(parsed, opt)
                elif opt.arg == NO_ARG or opt.arg == OPTIONAL and not value:
                    _store(parsed, opt, None)
                else:
                    _store(parsed, opt, value)
    return parsed


def env_flag_set(value: str) -> bool:
    """Whether a flag's ``SBATCH_*`` value sets it: strtol(value) != 0 with nothing after the number."""
    number, rest = strtol(value)
    return not value or value.lower() == "yes" or (number != 0 and not rest)


def parse_directives(script: str | bytes) -> Parsed:
    """``#SBATCH`` (and ``#HSUB``) lines; see :mod:`hivebatch.submit.script`."""
    from hivebatch.submit.script import read_directives

    return read_directives(script)


def help_text() -> str:
    lines = [
        "Usage: hsub [OPTIONS] SCRIPT [ARGS...]",
        "       hsub [OPTIONS] --wrap CMD",
        "",
        "Submit a GPU job through hivebatch. hsub takes every sbatch option, as #SBATCH lines too, and",
        "SBATCH_* variables and a Torque or LSF script's #PBS or #BSUB lines, exactly as sbatch reads",
        "them; hivebatch's own options may also be given as #HSUB lines. The command line wins over",
        "SBATCH_* variables, which win over the script's lines.",
        "",
        "Options hsub reads:",
    ]
    for o in OPTIONS:
        if o.sbatch and o.name in READ_BY_HSUB and o.name not in ("usage",):
            names = ", ".join(([f"-{o.short}"] if o.short else []) + [f"--{n}" for n in o.long])
            lines.append(f"  {names + (' VALUE' if o.arg == REQUIRED else ''):<30} {o.help}".rstrip())
    lines += ["", "hivebatch's own:"]
    for o in OPTIONS:
        if not o.sbatch:
            lines.append(f"  {'--' + o.name + (' ' + o.metavar if o.arg else ''):<30} {o.help}")
    passed = " ".join(f"--{o.name}" for o in OPTIONS if o.sbatch and o.name not in READ_BY_HSUB)
    lines += ["", "Every other sbatch option is passed to sbatch unchanged:"]
    lines += [f"  {chunk}" for chunk in _wrap(passed, 100)]
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)
