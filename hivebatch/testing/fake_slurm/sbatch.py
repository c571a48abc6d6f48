"""sbatch's command line and #SBATCH lines, read the way the fake Slurm needs them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from hivebatch.bounds import slurm_time_limit
from hivebatch.cells.config import parse_memory_mib
from hivebatch.errors import ConfigError
from hivebatch.slurm.types import SlurmError
from hivebatch.submit.timefmt import parse_time_option

OPTS_WITH_VALUE = {
    "-J": "name",
    "--job-name": "name",
    "-A": "account",
    "--account": "account",
    "-q": "qos",
    "--qos": "qos",
    "--comment": "comment",
    "-N": "nodes",
    "--nodes": "nodes",
    "--gres": "gres",
    "-w": "nodelist",
    "--nodelist": "nodelist",
    "-t": "time",
    "--time": "time",
    "-p": "partition",
    "--partition": "partition",
    "-o": None,
    "--output": None,
    "-e": None,
    "--error": None,
    "-D": None,
    "--chdir": None,
    "--open-mode": None,
    "--export": None,
    "--mem": None,
    "--tmp": "tmp",
    "--mem-per-cpu": "mem_per_cpu",
    "-c": "cpus_per_task",
    "--cpus-per-task": "cpus_per_task",
    "-n": "ntasks",
    "--ntasks": "ntasks",
    "--ntasks-per-node": "ntasks_per_node",
    "--gpus-per-node": "gpus_per_node",
    "--gpus-per-task": "gpus_per_task",
    "--signal": None,
    "--mail-type": None,
    "--begin": "begin",
    "--deadline": "deadline",
    "--time-min": "time_min",
    "--dependency": "dependency",
    "-d": "dependency",
    "--kill-on-invalid-dep": "kill_invalid_dep",
    "--wckey": None,
    "--gpus": "gpus",
    "-G": "gpus",
    "--array": "array",
    "-a": "array",
}
FLAGS = {
    "-H": "hold",
    "--hold": "hold",
    "--parsable": None,
    "--requeue": None,
    "--no-requeue": None,
    "--exclusive": "exclusive",
    "-O": "overcommit",
    "--overcommit": "overcommit",
    "--test-only": "test_only",
    "-Q": None,
    "--quiet": None,
}


def parse_sbatch(args: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        key, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
        if key in FLAGS and not eq:
            if FLAGS[key]:
                opts[FLAGS[key] or ""] = "1"
            i += 1
            continue
        if key in OPTS_WITH_VALUE:
            if not eq:
                if i + 1 >= len(args):
                    raise SlurmError(["sbatch"], 1, f"sbatch: option '{key}' requires an argument")
                val = args[i + 1]
                i += 1
            dest = OPTS_WITH_VALUE[key]
            if dest:
                opts[dest] = val
            i += 1
            continue
        raise SlurmError(["sbatch"], 1, f"sbatch: unrecognized option '{a}'")
    return opts


def sbatch_lines(script: str) -> list[str]:
    """#SBATCH options at the top of a script, before the first command (as sbatch reads them)."""
    out: list[str] = []
    for line in script.splitlines()[1:]:
        s = line.strip()
        if s.startswith("#SBATCH"):
            out += shlex.split(s[len("#SBATCH") :], comments=True)
        elif s and not s.startswith("#"):
            break
    return out


def time_limit(text: str | None) -> int | None:
    """Seconds of a ``-t`` value as sbatch reads it (None: none given, or UNLIMITED). Slurm keeps a limit
    past any date (-t 99999999999999, wrapped into 32 bits), which squeue's reader takes as UNLIMITED:
    so does the fake, from the start."""
    return slurm_time_limit(parse_time_option(text)) if text else None


def size_mb(text: str, option: str = "--tmp") -> int:
    """MB of a size as sbatch reads --tmp and --mem: a number, M unless a K, G or T follows."""
    try:
        return parse_memory_mib(text, option) or 0
    except ConfigError:
        raise SlurmError(["sbatch"], 1, f"sbatch: error: Invalid {option} specification {text}") from None


def begin_offset_s(text: str) -> int:
    """``now+N[seconds|minutes|hours|days]`` (sbatch --begin's relative form) in seconds."""
    rest = text[len("now+") :]
    digits = "".join(c for c in rest if c.isdigit())
    unit = rest[len(digits) :].lower()
    # Slurm takes the unit singular or plural (the lab's tests give --begin=now+1hour)
    scale = {"": 1, "second": 1, "minute": 60, "hour": 3600, "day": 86400}
    scale.update({f"{k}s": v for k, v in list(scale.items()) if k})
    if not digits or unit not in scale:
        raise SlurmError(["sbatch"], 1, f"sbatch: error: Invalid time specification {text}")
    return int(digits) * scale[unit]


def min_cpus(opts: Mapping[str, str], nodes: int) -> int:
    """What sbatch sends as the job's min_cpus (slurm_opt_create_job_desc): with --overcommit its fewest
    ``nodes``, else all its tasks' CPUs (tests/fixtures/slurm/overcommit.txt); squeue shows it as ``cpus``."""
    if opts.get("overcommit"):
        return max(nodes, 1)
    return int(opts.get("ntasks") or 1) * int(opts.get("cpus_per_task") or 1)
