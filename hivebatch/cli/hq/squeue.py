"""hq as squeue plus hivebatch's columns: squeue's own options (22.05, src/squeue/opts.c), read with the
same getopt rules, and squeue itself doing the selecting, sorting and printing.

hivebatch's columns (VC, class, placement, predicted start/end, slack, why) are asked of squeue as
markers carrying each job's id, then filled in from hivebatch's rows, so every squeue field, filter,
sort and width keeps squeue's exact bytes.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hivebatch.errors import HivebatchError
from hivebatch.getopt import NO_ARG, OPTIONAL, REQUIRED, Found, Spec, Table, getopt

# squeue's long options in its table order; ``=`` takes a value, ``[=]`` an optional one, /X its letter
_SQUEUE_TABLE = """
accounts=/A all/a array/r array-unique Format=/O format=/o federation help hide iterate=/i jobs[=]/j local
long/l licenses=/L cluster=/M clusters=/M me name=/n noconvert node=/w nodes=/w nodelist=/w noheader/h
partitions=/p priority/P qos=/q reservation=/R sib sibling sort=/S start steps[=]/s states=/t usage
user=/u users=/u verbose/v version/V json yaml
"""
# letters without a long name in squeue's options string ("A:ahi:j::lL:n:M:O:o:p:Pq:R:rs::S:t:u:U:vVw:")
_EXTRA_SHORTS = {"U": REQUIRED}
# hq's own options; they never reach squeue
OWN = {"json": NO_ARG, "config": REQUIRED, "finished": NO_ARG}

# hivebatch's columns: -O name (case-insensitive) or -o %{name} -> hq's field and its header
HB_FIELDS: dict[str, tuple[str, str]] = {
    "vc": ("vc", "VC"),
    "class": ("class", "CLASS"),
    "placement": ("placement", "PLACEMENT"),
    "predictedstart": ("start", "PRED_START"),
    "predictedend": ("end", "PRED_END"),
    "slack": ("slack", "SLACK"),
    "why": ("reason", "WHY"),
    "hbstate": ("hbstate", "HB_STATE"),
    "hbgpus": ("gpus", "HB_GPUS"),
    "starttime": ("start_time", "START_TIME"),
    "nodelistreason": ("nodelist_reason", "NODELIST(REASON)"),
}

# squeue --start's own layout (src/squeue/opts.c), with the start time and reason hivebatch's: Slurm
# has neither for a job the plugin holds (START_TIME N/A, reason JobHeldUser)
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19{starttime} %.6D %20Y %{nodelistreason}"
# squeue -l's (src/squeue/squeue.c), with the reason hivebatch's
LONG_FORMAT = (
    "jobarrayid:.18 ,partition:.9 ,name:.8 ,username:.8 ,state:.8 ,timeused:.10 ,timelimit:.9 ,numnodes:.6 ,"
    "nodelistreason:0"
)


def _table() -> Table:
    longs: list[tuple[str, Spec]] = []
    shorts: dict[str, Spec] = {}
    by_letter: dict[str, Spec] = {}
    for word in _SQUEUE_TABLE.split():
        spec_text, _, letter = word.partition("/")
        name = spec_text.removesuffix("[=]").removesuffix("=")
        arg = OPTIONAL if spec_text.endswith("[=]") else REQUIRED if spec_text.endswith("=") else NO_ARG
        spec = by_letter.get(letter) or Spec(name, arg)  # aliases share their letter's option
        if letter:
            by_letter.setdefault(letter, spec)
            shorts[letter] = spec
        longs.append((name, spec))
    shorts.update({k: Spec(k, v) for k, v in _EXTRA_SHORTS.items()})
    own = tuple((name, Spec(f"hq-{name}", arg)) for name, arg in OWN.items())
    # hq's --json replaces squeue's: its rows carry hivebatch's view
    return Table(tuple((n, s) for n, s in longs if n != "json"), shorts, own)


TABLE = _table()


@dataclass
class HqArgs:
    """hq's argv as read: what goes to squeue (as typed), hq's own options, the format asked for."""

    squeue: list[str]
    own: dict[str, str | bool]
    options: dict[str, str | bool]  # squeue's, by key, last one wins
    problems: list[str]
    words: list[str]  # plain words (squeue reads a job list after a bare -j)
    format: tuple[str, str] | None = None  # ("o" or "O", text) of the last -o/-O


# squeue's input variables (src/squeue/opts.c): a flag's is read whatever its value; each is read as its
# option given before the command line's, which win
_ENV_FLAGS = {("SQUEUE_ALL",): "-a", ("SQUEUE_ARRAY",): "-r", ("SQUEUE_ARRAY_UNIQUE",): "--array-unique",
              ("SQUEUE_FEDERATION",): "--federation", ("SQUEUE_LOCAL",): "--local", ("SQUEUE_PRIORITY",): "-P",
              ("SQUEUE_SIB", "SQUEUE_SIBLING"): "--sibling"}  # fmt: skip
_ENV_VALUES = {"SQUEUE_SORT": "-S", "SQUEUE_ACCOUNT": "-A", "SQUEUE_NAMES": "-n", "SQUEUE_PARTITION": "-p",
               "SQUEUE_QOS": "-q", "SQUEUE_STATES": "-t", "SQUEUE_USERS": "-u"}  # fmt: skip


def env_words(environ: Mapping[str, str], argv: Sequence[str]) -> list[str]:
    """squeue's input variables as the options they stand for. SQUEUE_LICENSES counts only when the
    command line names no partition (squeue tests the partitions there). SQUEUE_FORMAT and
    SQUEUE_FORMAT2 shape squeue's own default listing, which hq's default view replaces: squeue reads
    them itself where hq shows squeue's output (-l, --steps, …)."""
    words = [flag for names, flag in _ENV_FLAGS.items() if any(n in environ for n in names)]
    for var, option in _ENV_VALUES.items():
        if var in environ:
            words += [option, environ[var]]
    if "SQUEUE_LICENSES" in environ and "partitions" not in read_args(argv).options:
        words += ["-L", environ["SQUEUE_LICENSES"]]
    return words


def read_args(argv: Sequence[str]) -> HqArgs:
    out = HqArgs([], {}, {}, [], [])
    for item in getopt(list(argv), TABLE, stop_at_positional=False):
        if isinstance(item, Found):
            if item.spec.name.startswith("hq-"):
                out.own[item.spec.name[3:]] = True if item.value is None else item.value
                continue
            out.squeue.extend(item.words)
            out.options[item.spec.name] = True if item.value is None else item.value
            if item.spec.name in ("format", "Format"):
                out.format = ("o" if item.spec.name == "format" else "O", str(item.value))
        elif isinstance(item, str):
            out.problems.append(item)
        else:
            out.squeue.extend(item)
            out.words.extend(item)
    return out


# -o: %[.][size]{name} for hivebatch's columns; -O: name[:[.][size][suffix]]
_HB_PERCENT = re.compile(r"%(\.?)(\d*)\{(\w+)\}")
# starts each job's record in an -o format: a job name may hold a line break
RECORD = "\x1e"


def new_tag() -> str:
    """A word no job name can know, in every marker of one squeue call: a name printed with the markers'
    own characters must not read as another job's marker."""
    return f"hb{secrets.token_hex(6)}"


def _markers(tag: str) -> re.Pattern[str]:
    """A marker as squeue prints it: the job id (or JOBID on the header line) after a line start or
    \x01, then \x02, the tag, the column's index and \x03."""
    return re.compile("(?:^|\x01)([^\\s\x01]*) *\x02" + re.escape(tag) + "(\\d+)\x03", re.MULTILINE)


def job_of_record(text: str, tag: str) -> int | None:
    """The job a line (or an -o record) of marked squeue output is of: the id in its first marker."""
    return next((int(m[1]) for m in _markers(tag).finditer(text) if m[1].isdigit()), None)


def marked_ids(text: str, tag: str) -> list[int]:
    return sorted({int(m[1]) for m in _markers(tag).finditer(text) if m[1].isdigit()})


@dataclass(frozen=True)
class HbColumn:
    field: str  # hq's field name
    header: str
    width: int | None
    right: bool
    suffix: str = ""


def hb_fields_in(flag: str, text: str) -> bool:
    if flag == "o":
        return bool(_HB_PERCENT.search(text))
    return any(part.split(":", 1)[0].strip().lower() in HB_FIELDS for part in text.split(","))


def _hb(name: str) -> tuple[str, str]:
    found = HB_FIELDS.get(name.lower())
    if found is None:
        raise HivebatchError(f"unknown hivebatch field {name!r} (known: {', '.join(HB_FIELDS)})")
    return found


def marked_format(flag: str, text: str, tag: str = "") -> tuple[str, list[HbColumn]]:
    """The format given to squeue (hivebatch's columns as id markers carrying ``tag``) and those columns,
    in order. With a tag, an -o format also starts each record with ``RECORD`` and the tag."""
    cols: list[HbColumn] = []
    if flag == "o":

        def mark(m: re.Match[str]) -> str:
            field, header = _hb(m.group(3))
            cols.append(HbColumn(field, header, int(m.group(2)) if m.group(2) else None, bool(m.group(1))))
            return f"\x01%A\x02{tag}{len(cols) - 1}\x03"

        marked = _HB_PERCENT.sub(mark, text)
        return (f"{RECORD}{tag}{marked}" if tag else marked), cols
    # each of squeue's own fields goes to squeue as typed: a suffix after its width ("jobarrayid:.18 ,"
    # as squeue -l has it) is part of its output
    parts = text.split(",")
    out: list[str] = []
    for i, part in enumerate(parts):
        name, _, rest = part.partition(":")
        follows_hb = i + 1 < len(parts) and parts[i + 1].split(":", 1)[0].strip().lower() in HB_FIELDS
        if name.strip().lower() in HB_FIELDS:
            m = re.match(r"(\.?)(\d*)(.*)", rest)
            assert m is not None
            field, header = _hb(name.strip())
            # squeue's width when none is given; 0: as wide as the value (squeue -l's reasonlist:0)
            width = int(m.group(2)) if m.group(2) else 20
            cols.append(HbColumn(field, header, width or None, bool(m.group(1)), m.group(3)))
            part = f"JobID:40\x02{tag}{len(cols) - 1}\x03"
        if follows_hb:
            part += "\x01" if ":" in part else ":20\x01"  # squeue's width when none is given
        out.append(part)
    return ",".join(out), cols


def _fit(value: str, width: int | None, right: bool) -> str:
    if width is None:
        return value
    value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def fill_markers(text: str, cols: list[HbColumn], value: Callable[[str, int], str], tag: str = "") -> str:
    """Each marker replaced by its column's value for that job (``value(field, job_id)``), or its header
    on squeue's header line (where squeue printed JOBID for the marker); record starts dropped."""

    def one(m: re.Match[str]) -> str:
        col = cols[int(m.group(2))]
        job = m.group(1)
        shown = col.header if not job.isdigit() else value(col.field, int(job))
        return _fit(shown, col.width, col.right) + col.suffix

    if tag:
        text = text.replace(f"{RECORD}{tag}", "")
    markers = _markers(tag)
    return "\n".join(markers.sub(one, line) for line in text.split("\n"))


def run_squeue(args: Sequence[str]) -> str:
    """squeue's standard output; its errors become one hq error line (squeue's own words)."""
    try:
        # errors="replace": another user's job name in Latin-1 must not stop hq (squeue prints the bytes as
        # they are, which a UTF-8 terminal shows as the same replacement character)
        proc = subprocess.run(
            ["squeue", *args],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            check=False,
            timeout=120,
        )
    except FileNotFoundError:
        raise HivebatchError("squeue: command not found (is slurm-client installed?)") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise HivebatchError(lines[-1] if lines else f"squeue failed (exit {proc.returncode})")
    return proc.stdout
