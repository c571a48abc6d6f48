"""``hq``: squeue plus hivebatch's view — VC, class, exact GPUs, predicted start/finish, slack, why pending.

Every squeue option is read as squeue reads it and squeue does the selecting; what hq does not add
is squeue's own output, byte for byte. ``hq vc [NAME]`` shows a virtual cluster's cells. hq only
reads (Slurm and the controller's ledger) and still answers, with less detail, when the controller
has never run. No click or argparse for the job view, to keep start-up close to squeue's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hivebatch.errors import ConfigError, HivebatchError

PROG = "hq"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 1, like every hivebatch error
        raise HivebatchError(f"{message} (see hq --help)")


HELP = """Usage: hq [squeue options] [--json] [--finished] [--config FILE]
       hq vc [NAME] [--json]

squeue with hivebatch's view. Every squeue option works as in squeue (it selects, sorts and prints);
without -o/-O hq shows hivebatch's table: VC, class, exact GPUs, predicted start and finish, slack
against the class's expected completion time and why a job waits. --start and -l are squeue's, with
hivebatch's predicted start (START_TIME) and why a GPU job waits (NODELIST(REASON)).

hivebatch's columns, beside squeue's own fields:
  -o "%.18i %{vc} %.10{slack}"     %[.][size]{NAME}
  -O "JobID,VC:8,Slack:.8"         NAME[:[.][size][suffix]]
  names: {fields}
hq's own options:
  --json        hivebatch's rows as a JSON array
  --finished    also finished jobs the controller's ledger remembers
  --config FILE hivebatch configuration file
"""


def _vc_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"{PROG} vc", add_help=False, description="Show a virtual cluster's cells and GPUs.")
    p.add_argument("--help", action="help", help="show this help")
    p.add_argument("name", nargs="?", help="the VC (default: every VC)")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    p.add_argument("--config", help="hivebatch configuration file")
    return p


def _csv(text: str | None) -> set[str] | None:
    return None if text is None else {x.strip() for x in text.split(",") if x.strip()}


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def load_config_soft(explicit: str | None) -> tuple[Path | None, dict[str, Any]]:
    """The config, or (None, {}) when there is none (hq then shows what Slurm says)."""
    from hivebatch.config import load_config

    try:
        return load_config(explicit)
    except ConfigError:
        if explicit:
            raise
        return None, {}


def _warn(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


# options hq can apply itself on hivebatch's rows; any other squeue selection is asked of squeue
_OWN_SELECTION = frozenset({"user", "accounts", "qos", "states", "jobs", "me", "noheader", "iterate"})
# options that ask for one of squeue's own outputs: squeue answers them itself
_SQUEUE_OUTPUTS = frozenset({"long", "steps", "start", "version", "usage", "yaml", "verbose", "priority"})


def run_jobs(argv: list[str]) -> int:
    from hivebatch.cli.hq.squeue import env_words, hb_fields_in, read_args

    args = read_args([*env_words(os.environ, argv), *argv])
    if args.problems:
        raise HivebatchError("; ".join(args.problems) + " (see hq --help)")
    if args.options.get("help"):
        from hivebatch.cli.hq.squeue import HB_FIELDS

        print(HELP.replace("{fields}", ", ".join(HB_FIELDS)), end="")
        return 0
    fmt = args.format
    outputs = _SQUEUE_OUTPUTS & set(args.options)
    if outputs in ({"start"}, {"long"}) and not args.own.get("json") and (fmt is None or hb_fields_in(*fmt)):
        from hivebatch.cli.hq.squeue import LONG_FORMAT, START_FORMAT

        # squeue's --start or -l layout with hivebatch's predictions and reasons, or the format asked
        default = ("o", START_FORMAT) if outputs == {"start"} else ("O", LONG_FORMAT)
        fmt, outputs = fmt or default, set()
    if not args.own and ((fmt is not None and not hb_fields_in(*fmt)) or outputs):
        os.execvp("squeue", ["squeue", *args.squeue])  # squeue's own output, byte for byte
    iterate = _iterate_s(str(args.options["iterate"])) if "iterate" in args.options else 0
    while True:
        # squeue's -l prints the date line itself (hq -l asks it for its listing)
        if iterate and not args.options.get("noheader") and "long" not in args.options:
            import time

            print(time.strftime("%a %b %d %H:%M:%S %Y"))
        _show_jobs(args, fmt)
        if not iterate:
            return 0
        print(flush=True)
        import time

        time.sleep(iterate)


def _iterate_s(text: str) -> int:
    """squeue reads -i with atoi() and refuses what is not above 0 (``squeue: error: --iterate=abc``)."""
    from hivebatch.strtol import strtol

    seconds = min(strtol(text)[0], 2**31 - 1)  # atoi() gives a C int
    if seconds <= 0:
        raise HivebatchError(f"--iterate={text}: give the seconds between listings, a whole number above 0")
    return seconds


def _selected_ids(args: Any) -> list[int] | None:
    """The unique job ids squeue shows for the selection asked, in squeue's order; None when hq
    applies the selection itself (only the options it knows were given)."""
    from hivebatch.cli.hq.squeue import run_squeue

    jobs = args.options.get("jobs")
    simple_jobs = jobs is None or (isinstance(jobs, str) and jobs.replace(",", "").isdigit())
    if set(args.options) <= _OWN_SELECTION and simple_jobs and not args.words:
        return None
    keep = [w for w in args.squeue if w not in ("-h", "--noheader")]
    if args.own.get("finished") and "states" not in args.options:
        keep += ["-t", "all"]  # the finished jobs Slurm still lists (MinJobAge) match the selection too
    try:
        out = run_squeue([*_without_format(keep), "-h", "-o", "%A"])
    except HivebatchError as exc:
        # squeue refuses a job id Slurm has forgotten; the ledger may still say how it ended
        if not (args.own.get("finished") and _named_ids(args) and "Invalid job id" in str(exc)):
            raise
        out = ""
    # with -r the pending tasks of an array print its record's id once per task: one row stands for them
    return list(dict.fromkeys(int(x) for x in out.split()))


def _named_ids(args: Any) -> set[int]:
    """The job ids named with -j (``-j 12,13`` or ``-j 12 13``, as squeue reads them)."""
    jobs = args.options.get("jobs")
    if jobs is None:
        return set()
    named = [*(str(jobs).split(",") if isinstance(jobs, str) else []), *args.words]
    return {int(x) for word in named for x in str(word).split(",") if x.isdigit()}


def _without_format(words: list[str]) -> list[str]:
    """squeue's argv minus -o/-O/-i and their values (hq asks for its own format)."""
    from hivebatch.cli.hq.squeue import TABLE
    from hivebatch.getopt import Found, getopt

    out: list[str] = []
    for item in getopt(words, TABLE, stop_at_positional=False):
        if isinstance(item, Found):
            if item.spec.name not in ("format", "Format", "iterate"):
                out.extend(item.words)
        elif isinstance(item, list):
            out.extend(item)
    return out


def _rows(args: Any, ids: list[int] | None) -> list[Any]:
    from hivebatch.cli.hq.rows import Filters, collect_rows, parse_states
    from hivebatch.state.ledger import read_ledger

    o = args.options
    states, all_states = None, False
    if "states" in o and ids is None:
        # the variable stands for -t, which the command line overrides
        typed = os.environ.get("SQUEUE_STATES") != o["states"]
        states, all_states = parse_states(str(o["states"]), "-t/--states" if typed else "SQUEUE_STATES")
    job_ids: set[int] | None = set(ids) if ids is not None else None
    if ids is None and isinstance(o.get("jobs"), str):
        job_ids = _named_ids(args)
    if ids is not None and args.own.get("finished"):
        # jobs named by id that Slurm no longer lists: the ledger may remember how they ended
        job_ids = (job_ids or set()) | _named_ids(args)
    users = _csv(str(o["user"])) if "user" in o and ids is None else None
    if o.get("me") and ids is None:
        users = (users or set()) | {_me()}
    filters = Filters(users=users, accounts=_csv(str(o["accounts"])) if "accounts" in o and ids is None else None,
                      qos=_csv(str(o["qos"])) if "qos" in o and ids is None else None, states=states,
                      job_ids=job_ids, all_states=all_states or bool(args.own.get("finished")) or ids is not None)  # fmt: skip
    config_path, config = load_config_soft(str(args.own["config"]) if "config" in args.own else None)
    include_final = filters.all_states or bool(states and states - {"PENDING", "RUNNING"})
    ledger = (
        read_ledger(config_path, config, include_final=include_final, job_ids=job_ids)
        if config_path
        else None
    )
    from hivebatch.slurm import SlurmError, get_backend

    try:
        slurm_jobs = get_backend().list_jobs(sorted(job_ids) if job_ids else None)
    except SlurmError as exc:
        if ledger is None or not ledger.available:
            raise
        _warn(f"Slurm did not answer ({str(exc).splitlines()[0]}); showing the controller's ledger only")
        slurm_jobs = []
    rows = collect_rows(
        slurm_jobs,
        ledger.jobs if ledger else [],
        filters,
        ledger_found=config_path is not None,
        start_timeout_s=_start_timeout(config_path, config),
        grace_s=_opportunistic_grace(config),
    )
    if ids is not None:  # squeue's selection and order; finished jobs from the ledger after them
        order = {j: i for i, j in enumerate(ids)}
        finished = [r for r in rows if r.job_id not in order and args.own.get("finished") and not r.pending
                    and r.state not in ("RUNNING",)]  # fmt: skip
        rows = sorted((r for r in rows if r.job_id in order), key=lambda r: order[r.job_id]) + finished
    if o.get("array"):
        from hivebatch.cli.hq.rows import expand_arrays

        rows = expand_arrays(rows)
    if config and any(r.gpu_mem_mib for r in rows):
        from hivebatch.sharing.integration import add_gpu_capacity

        add_gpu_capacity(rows, config)  # GPU memory from the config, to show slices as 8G/32G
    if sys.stdout.isatty() and "noheader" not in args.options:
        if config_path is None:
            from hivebatch.config import SEARCH_PATH

            _warn(
                f"no hivebatch configuration here ({', '.join(map(str, SEARCH_PATH))}; HIVEBATCH_CONFIG unset): "
                "Slurm's view only, without the controller's placements, predictions and reasons"
            )
        elif ledger is not None and not ledger.available:
            _warn("the hivebatch controller has not run yet: no placements or predictions to show")
        elif ledger is not None and (late := stale_controller(config, ledger.snapshot_time, _now())):
            _warn(late)
    return rows


def stale_controller(config: dict[str, Any], last_cycle: Any, now: Any) -> str | None:
    """What to say when the controller's last cycle is long past (seen on the lab: with the controller
    stopped, hq went on saying a new job waits "for the hivebatch controller to look at it")."""
    from hivebatch.config import DEFAULT_INTERVAL_S

    if last_cycle is None:
        return None
    interval = _controller_seconds(config, "interval_s", DEFAULT_INTERVAL_S) or DEFAULT_INTERVAL_S
    ago = (now - last_cycle).total_seconds()
    # three missed cycles (and never under 3 min): one slow cycle or a cron's jitter is not news
    if ago <= max(3 * interval, 180.0):
        return None
    since = f"{ago / 3600:.1f} h" if ago >= 7200 else f"{ago / 60:.0f} min"
    return (
        f"the hivebatch controller last ran {since} ago (every {interval:.0f} s is configured): "
        "GPU jobs wait until it runs again; tell your admin"
    )


def _start_timeout(config_path: Path | None, config: dict[str, Any]) -> float | None:
    """The controller's bound on a placed job's start (None without a config)."""
    from hivebatch.config import DEFAULT_START_TIMEOUT_S

    if config_path is None:
        return None
    return _controller_seconds(config, "start_timeout_s", DEFAULT_START_TIMEOUT_S)


def _opportunistic_grace(config: dict[str, Any]) -> float:
    """The notice of opportunistic jobs, which is also their QOS's GraceTime (hadmin slurm-config)."""
    from hivebatch.notice import parse_notice

    try:
        return float(parse_notice(config).slurm_grace_s)
    except ConfigError:
        return 0.0


def _controller_seconds(config: dict[str, Any], key: str, default: float) -> float | None:
    """``controller.KEY`` as the controller reads it; None when the controller would refuse it."""
    from hivebatch.config import controller_seconds

    section = config.get("controller") or {}
    if not isinstance(section, dict):
        return None
    try:
        return controller_seconds(section, key, default)
    except ConfigError:
        return None


def _now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _show_jobs(args: Any, fmt: tuple[str, str] | None) -> None:
    if fmt is not None:
        _show_marked(args, fmt)
        return
    rows = _rows(args, _selected_ids(args))
    if args.own.get("json"):
        import json

        print(json.dumps([r.to_json() for r in rows], indent=2))
        return
    from hivebatch.cli.hq.columns import DEFAULT_FIELDS, Column, render_plain

    header = "noheader" not in args.options
    if sys.stdout.isatty() and header:
        from hivebatch.cli.hq.columns import render_rich

        render_rich(rows, list(DEFAULT_FIELDS), _now())
        return
    text = render_plain(rows, [Column(f) for f in DEFAULT_FIELDS], False, header, _now())
    if text:
        print(text)


def _show_marked(args: Any, fmt: tuple[str, str]) -> None:
    """squeue's output for the format asked, hivebatch's columns filled in from hivebatch's rows."""
    from hivebatch.cli.hq import squeue as sq
    from hivebatch.cli.hq.columns import FIELDS

    flag, text = fmt
    tag = sq.new_tag()
    marked, cols = sq.marked_format(flag, text, tag)
    out = sq.run_squeue([*_without_format(args.squeue), f"-{flag}", marked])
    ids = sq.marked_ids(out, tag)
    by_id = {r.job_id: r for r in _rows(args, ids)} if ids else {}
    now = _now()
    if "start" in args.options and "sort" not in args.options:
        out = _by_predicted_start(out, by_id, tag)

    def value(field: str, job_id: int) -> str:
        row = by_id.get(job_id)
        return FIELDS[field].get(row, now) if row is not None else "-"

    sys.stdout.write(sq.fill_markers(out, cols, value, tag))


def _by_predicted_start(out: str, by_id: dict[int, Any], tag: str) -> str:
    """squeue --start's records in order of the start shown (hivebatch's prediction, else Slurm's;
    unknown last), as squeue sorts by its own (--sort=S); records without a job (the header) stay
    first. A record is a line, or with an -o format all that follows its start (a name may hold a
    line break)."""
    import datetime as dt

    from hivebatch.cli.hq.squeue import RECORD, job_of_record

    start = f"{RECORD}{tag}"
    if tag and start in out:
        before, *records = out.split(start)
        records = [start + r for r in records]
        tail: list[str] = []
        joiner = ""
    else:
        lines = out.split("\n")
        tail = [lines.pop()] if lines and lines[-1] == "" else []
        before, records, joiner = "", lines, "\n"
    head: list[str] = []
    jobs: list[tuple[dt.datetime, str]] = []
    for record in records:
        job = job_of_record(record, tag)
        if job is None:
            head.append(record)
            continue
        row = by_id.get(job)
        shown = row.expected_start if row is not None else None
        jobs.append((shown or dt.datetime.max, record))
    return before + joiner.join([*head, *(r for _, r in sorted(jobs, key=lambda j: j[0])), *tail])


def run_vc(argv: list[str]) -> int:
    from hivebatch.cli.hq.vc import show_vcs

    ns = _vc_parser().parse_args(argv)
    config_path, config = load_config_soft(ns.config)
    if config_path is None:
        raise ConfigError(
            "hq vc needs the hivebatch configuration: pass --config FILE or set HIVEBATCH_CONFIG"
        )
    return show_vcs(config_path, config, ns.name, as_json=ns.json)


def run(argv: list[str]) -> int:
    if argv and argv[0] == "vc":
        return run_vc(argv[1:])
    return run_jobs(argv)


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except HivebatchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        code = 1
    except BrokenPipeError:
        code = 0
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
