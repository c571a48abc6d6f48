"""``hq``: squeue with hivebatch's view — VC, class, exact GPUs, predicted start/finish, slack, why pending.

``hq vc [NAME]`` shows a virtual cluster's cells: bound, used and free. hq only reads (Slurm and the
controller's ledger) and still answers, with less detail, when the controller has never run.
Options are parsed with argparse (not click) to keep start-up close to squeue's.
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

    def format_help(self) -> str:
        text = super().format_help()
        if self.prog != PROG:
            return text
        from hivebatch.cli.hq.columns import FIELDS

        fields = ", ".join(f"{name}" + (f" (%{f.letter})" if f.letter else "") for name, f in FIELDS.items())
        return f"{text}\nfields for -o: {fields}\n"


def _job_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        add_help=False,
        description="Show hivebatch jobs like squeue, with VC, class, exact GPUs, predicted start and "
        "finish, slack against the class's expected completion time and why a job waits. "
        "`hq vc [NAME]` shows a virtual cluster's cells.",
    )
    p.add_argument("--help", action="help", help="show this help")
    p.add_argument("--me", action="store_true", help="only my jobs")
    p.add_argument("-u", "--user", help="only these users (comma-separated)")
    p.add_argument("-A", "--account", help="only these VCs (comma-separated)")
    p.add_argument("-q", "--qos", help="only these classes (comma-separated)")
    p.add_argument(
        "-t", "--states", help="only these states: PENDING,RUNNING,… or PD,R,…; 'all' for every state"
    )
    p.add_argument("-j", "--jobs", help="only these job ids (comma-separated)")
    p.add_argument("-a", "--all", action="store_true", help="include finished jobs the ledger remembers")
    p.add_argument("-o", "--format", help="squeue-style '%%.8i %%u %%N' or field list 'jobid,vc,placement'")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("--json", action="store_true", help="a JSON array of jobs")
    p.add_argument("--config", help="hivebatch configuration file")
    return p


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


def run_jobs(argv: list[str]) -> int:
    import datetime as dt

    from hivebatch.cli.hq.rows import Filters, collect_rows, parse_states
    from hivebatch.state.ledger import read_ledger

    ns = _job_parser().parse_args(argv)
    states, all_states = parse_states(ns.states) if ns.states else (None, False)
    job_ids: set[int] | None = None
    if ns.jobs:
        try:
            job_ids = {int(x) for x in _csv(ns.jobs) or set()}
        except ValueError:
            raise HivebatchError(f"-j/--jobs: job ids are numbers, got {ns.jobs!r}") from None
    users = _csv(ns.user)
    if ns.me:
        users = (users or set()) | {_me()}
    filters = Filters(users=users, accounts=_csv(ns.account), qos=_csv(ns.qos), states=states,
                      job_ids=job_ids, all_states=all_states or ns.all)  # fmt: skip
    pieces = None
    if ns.format:
        from hivebatch.cli.hq.columns import parse_format

        pieces = parse_format(ns.format)  # bad formats fail before anything is read

    config_path, config = load_config_soft(ns.config)
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
    rows = collect_rows(slurm_jobs, ledger.jobs if ledger else [], filters)
    if config and any(r.gpu_mem_mib for r in rows):
        from hivebatch.sharing.integration import add_gpu_capacity

        add_gpu_capacity(rows, config)  # GPU memory from the config, to show slices as 8G/32G
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)

    if ns.json:
        import json

        print(json.dumps([r.to_json() for r in rows], indent=2))
        return 0
    from hivebatch.cli.hq.columns import DEFAULT_FIELDS, Column, render_plain

    if pieces is None and sys.stdout.isatty() and not ns.noheader:
        from hivebatch.cli.hq.columns import render_rich

        render_rich(rows, list(DEFAULT_FIELDS), now)
    else:
        if pieces is None:
            pieces = ([Column(f) for f in DEFAULT_FIELDS], False)
        text = render_plain(rows, pieces[0], pieces[1], not ns.noheader, now)
        if text:
            print(text)
    if ledger is not None and not ledger.available and not ns.noheader and sys.stdout.isatty():
        _warn("the hivebatch controller has not run yet: no placements or predictions to show")
    return 0


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
