"""``#PBS`` and ``#BSUB`` lines, translated into sbatch options as sbatch 22.05 does (src/sbatch/xlate.c).

sbatch reads a batch script's Torque/PBS Pro or LSF directives after its ``#SBATCH`` lines (unless
``--ignore-pbs``), so they override them, and the ``SBATCH_*`` variables and the command line override
both. Only one kind is read: ``#BSUB`` when the script has any, otherwise ``#PBS``. Unlike ``#SBATCH``
lines they are read past the first command, up to the hundredth line that is not a comment.

The translation is sbatch's own, quirks included: a resource list is scanned for its keywords character
by character (``xmem=2gb`` sets ``--mem``), ``proc=`` skips the entry after it, and ``naccelerators``
adds to a ``--gres`` the ``#SBATCH`` lines already gave. It needs those values: ``current`` holds them
by long option name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hivebatch.getopt import NO_ARG, OPTIONAL, REQUIRED, Found, Spec, Table, getopt
from hivebatch.strtol import strtol
from hivebatch.submit.script import argument_words

NON_COMMENT_LINES = 100  # xlate_batch_script stops after this many lines not starting with '#'


@dataclass
class Translated:
    kind: str | None = None  # "#BSUB", "#PBS" or None (no such line)
    words: list[str] = field(default_factory=list)  # sbatch options, ``--name=value``, in sbatch's order
    problems: list[str] = field(default_factory=list)
    umask: int | None = None  # ``#PBS -W umask=``: sbatch's only option with no name of its own


def translate(text: str, current: Mapping[str, str | bool] | None = None) -> Translated:
    """The script's ``#BSUB`` or ``#PBS`` lines as sbatch options; ``current``: what the ``#SBATCH``
    lines set, by long option name."""
    for magic, table, apply in (("#BSUB", _BSUB, _bsub_option), ("#PBS", _PBS, _pbs_option)):
        argv, problems = _directive_argv(text, magic)
        if argv is None:
            continue
        out = _Out(Translated(kind=magic, problems=problems), dict(current or {}))
        if magic == "#BSUB":
            # LSF's -cwd is one dash and four letters; sbatch renames it where an option may stand
            argv = ["-c" if w == "-cwd" and i % 2 == 0 else w for i, w in enumerate(argv)]
        for item in getopt(argv, table, stop_at_positional=True):
            if isinstance(item, Found):
                apply(out, item.spec.name, item.value)
            elif isinstance(item, str):
                out.fail(f"{magic} lines: {item}")
            elif item:
                out.fail(f"{magic} lines: Invalid argument: {item[0]}")  # sbatch's words
            if out.result.problems:
                break  # sbatch exits at the first one
        return out.result
    return Translated()


def _directive_argv(text: str, magic: str) -> tuple[list[str] | None, list[str]]:
    """Every word of every ``magic`` line (None: no such line), and the lines sbatch cannot read."""
    argv: list[str] = []
    problems: list[str] = []
    found = False
    non_comments = 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.startswith(magic):
            non_comments += not line.startswith("#")
            if non_comments > NON_COMMENT_LINES:
                break
            continue
        found = True
        words, problem = argument_words(line[len(magic) :])
        if problem:
            problems.append(f"script line {lineno}: {magic} line cannot be read: {problem}")
        argv.extend(words)
    return (argv if found else None), problems


@dataclass
class _Out:
    result: Translated
    current: dict[str, str | bool]

    def set(self, name: str, value: str | None = None) -> None:
        self.result.words.append(f"--{name}" if value is None else f"--{name}={value}")
        self.current[name] = True if value is None else value

    def add(self, name: str, value: str, in_front: bool = False) -> None:
        """``value`` added to what an #SBATCH line or an earlier line gave the option, comma-separated."""
        before = self.current.get(name)
        if isinstance(before, str) and before:
            value = f"{value},{before}" if in_front else f"{before},{value}"
        self.set(name, value)

    def fail(self, problem: str) -> None:
        self.result.problems.append(problem)


def _table(spec: str) -> Table:
    """``spec``: ``letter/long`` words (a letter alone has no long name), ``:`` after a letter that
    takes a value, ``?`` after a long name whose value is optional (given only as ``--name=value``)."""
    shorts: dict[str, Spec] = {}
    longs: list[tuple[str, Spec]] = []
    for word in spec.split():
        letter, _, name = word.partition("/")
        takes = letter.endswith(":")
        letter = letter.rstrip(":")
        long_arg = OPTIONAL if name.endswith("?") else REQUIRED if takes else NO_ARG
        name = name.rstrip("?") or letter
        shorts[letter] = Spec(name, REQUIRED if takes else NO_ARG)
        if name != letter:
            longs.append((name, Spec(name, long_arg)))
    return Table(longs=tuple(longs), shorts=shorts)


# _set_bsub_options: "+c:e:J:m:M:n:o:q:W:x"; -n has no long name
_BSUB = _table("c:/cwd e:/error_file J:/job_name m:/hostname M:/memory_limit o:/output_file q:/queue_name "
               "W:/time x/exclusive n:")  # fmt: skip
# _set_pbs_options: "+a:A:c:C:e:hIj:J:k:l:m:M:N:o:p:q:r:S:t:u:v:VW:z"
_PBS = _table(
    "a:/start_time A:/account c:/checkpoint C:/working_dir e:/error h/hold I/interactive j:/join? "
    "J:/job_array k:/keep l:/resource_list m:/mail_options M:/mail_user_list N:/job_name o:/out "
    "p:/priority q:/destination r:/rerunable S:/script_path t:/array u:/running_user v:/variable_list "
    "V/all_env W:/attributes z/no_std"
)


def _bsub_option(out: _Out, name: str, value: str | None) -> None:
    arg = value or ""
    if name == "cwd":
        out.set("chdir", arg)
    elif name in ("error_file", "job_name", "output_file"):
        out.set({"error_file": "error", "job_name": "job-name", "output_file": "output"}[name], arg)
    elif name == "hostname":
        out.set("nodelist", arg.replace(" ", ","))
    elif name == "memory_limit":
        out.set("mem-per-cpu", arg + "K" if arg[-1:].isdigit() else arg)  # LSF's unit is KB
    elif name == "n":
        if "," in arg and not arg.partition(",")[2]:
            out.fail(f"#BSUB -n format not correct given: {arg!r}")
            return
        out.set("ntasks", arg.partition(",")[2] or arg)  # min,max: Slurm takes the max
    elif name == "queue_name":
        out.set("partition", arg)
    elif name == "time":
        out.set("time", arg)
    elif name == "exclusive":
        out.set("exclusive")


_PBS_SAME = {"account": "account", "error": "error", "out": "output", "mail_user_list": "mail-user",
             "job_name": "job-name", "priority": "nice", "destination": "partition",
             "start_time": "begin", "job_array": "array", "array": "array"}  # fmt: skip


def _pbs_option(out: _Out, name: str, value: str | None) -> None:
    arg = value or ""
    if name in _PBS_SAME:
        out.set(_PBS_SAME[name], arg)
    elif name == "hold":
        out.set("hold")
    elif name == "resource_list":
        _resource_list(out, arg)
    elif name == "mail_options":
        out.set("mail-type", _mail_type(arg))
    elif name == "variable_list":
        out.add("export", arg)
    elif name == "attributes":
        if arg[:6].lower() == "umask=":
            _umask(out, arg[6:])
        elif arg[:7].lower() == "depend=":
            out.set("dependency", arg[7:])
    # the others (checkpoint, working_dir, interactive, join, keep, rerunable, script_path,
    # running_user, all_env, no_std) sbatch reads and drops


def _mail_type(arg: str) -> str:
    low = arg.lower()
    if "n" in low:
        return "NONE"
    return ",".join(t for letter, t in (("b", "BEGIN"), ("e", "END"), ("a", "FAIL")) if letter in low)


def _umask(out: _Out, raw: str) -> None:
    """strtol(raw, NULL, 0): octal with a leading 0, hex with 0x, decimal otherwise; what follows the
    number is ignored."""
    value = strtol(raw, 0)[0]
    if not 0 <= value <= 0o777:
        out.fail("Invalid -W umask= specification")
    else:
        out.result.umask = value


def _resource_list(out: _Out, rl: str) -> None:
    """_parse_pbs_resource_list: one ``-l`` value."""
    gpus = 0
    pbs_pro = 0  # select:1 ncpus:2 mpiprocs:4
    i = 0

    def value(sep: str) -> str:
        nonlocal i
        end = rl.find(sep, i)
        got = rl[i:] if end < 0 else rl[i:end]
        i = len(rl) if end < 0 else end + 1
        return got

    def skip_entry() -> None:
        nonlocal i
        end = rl.find(",", i)
        i = len(rl) if end < 0 else end + 1

    def at(key: str, fold: bool = False) -> bool:
        nonlocal i
        hit = rl[i : i + len(key)].lower() == key if fold else rl.startswith(key, i)
        if hit:
            i += len(key)
        return hit

    def size(raw: str) -> str:
        return raw[:-1] if raw[-1:].upper() == "B" else raw  # Torque's GB, MB

    simple: dict[str, Callable[[str], None]] = {
        "cput=": lambda v: out.set("time", v),
        "file=": lambda v: out.set("tmp", size(v)),
        "mem=": lambda v: out.set("mem", size(v)),
        "nice=": lambda v: out.set("nice", v),
        "nodes=": lambda v: _nodes(out, v),
        "pcput=": lambda v: out.set("time", v),
        "walltime=": lambda v: out.set("time", v),
    }
    while i < len(rl):
        if at("accelerator=", fold=True):
            if rl[i : i + 4].lower() == "true" and gpus < 1:
                gpus = 1
        elif any(
            at(k) for k in ("arch=", "host=", "opsys=", "other=", "pmem=", "pvmem=", "software=", "vmem=")
        ):
            skip_entry()
        elif at("mpiprocs=", fold=True):
            pbs_pro |= 4
            out.set("ntasks-per-node", value(":"))
        elif at("naccelerators=", fold=True):
            raw = value(",")
            gpus, rest = strtol(raw)  # Slurm's parse_int: the whole value, above 0
            if rest or gpus <= 0:
                out.fail(f'Invalid numeric value "{raw}" for naccelerators.')
                return
        elif at("ncpus=", fold=True):
            pbs_pro |= 2
            out.set("mincpus", value(":"))
        elif at("proc="):
            out.add("constraint", value(","), in_front=True)
            skip_entry()
        elif at("select=", fold=True):
            pbs_pro |= 1
            out.set("nodes", value(":"))
        else:
            key = next((k for k in simple if at(k)), None)
            if key is None:
                i += 1
            else:
                simple[key](value(","))
    if pbs_pro == 7:
        cpus, per_node = _number(out.current.get("mincpus")), _number(out.current.get("ntasks-per-node"))
        if per_node > 0 and cpus > per_node:
            out.set("cpus-per-task", str(cpus // per_node))
    if gpus > 0:
        out.add("gres", f"gpu:{gpus}")


def _number(raw: str | bool | None) -> int:
    return strtol(raw)[0] if isinstance(raw, str) else 0


_NODE_PART = re.compile(r"[^+:]*[+:]?")  # up to the next + or :, and it


def _nodes(out: _Out, opts: str) -> None:
    """_parse_pbs_nodes_opts: ``N[:ppn=P][:gpus=G][+…]`` or host names, read character by character."""
    ppn = nodes = 0
    hosts: list[str] = []
    i = 0

    def part() -> str:
        nonlocal i
        m = _NODE_PART.match(opts, i)
        assert m is not None  # the pattern matches the empty string
        i = m.end()
        return m.group().rstrip("+:")

    while i < len(opts):
        if opts.startswith("gpus=", i):
            i += 5
            out.set("gpus-per-node", part())
        elif opts.startswith("ppn=", i):
            i += 4
            ppn += _number(part())
        elif opts[i] in "0123456789":
            nodes += _number(part())
        elif opts[i].isascii() and opts[i].isalpha():
            hosts.append(part())
        else:
            i += 1
    if nodes:
        out.set("nodes", str(nodes))
    if ppn:
        out.set("ntasks", str(ppn * (nodes or 1)))
    if hosts:
        out.set("nodelist", ",".join(hosts))
