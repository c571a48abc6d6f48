"""Each user's use of the strict classes, from the ledger, and the usage file the job_submit plugin reads.

The plugin runs inside slurmctld and cannot query the ledger, so at the end of every cycle the
controller writes ``hivebatch_usage.lua`` next to it: a Lua chunk returning one table, per user, VC
and class, of GPU-hours in the last 7 days and jobs holding GPUs. The plugin loads it in an empty
environment (it can return data, nothing else), and ignores it when it is older than the site table
says (the controller stopped): limits are then checked only at placement (docs/enforcement.md).
"""

from __future__ import annotations

import datetime as dt
import os
import pwd
import tempfile
from collections.abc import Mapping
from pathlib import Path

from hivebatch.jobsubmit import lua_literal
from hivebatch.userlimits import WINDOW, StrictUse, UsageKey, aware_utc


def usage_lua(usage: Mapping[UsageKey, StrictUse], now: dt.datetime) -> str:
    """The usage file's text: one ``return { ... }`` chunk, keys sorted so equal usage reads the same."""
    users: dict[str, dict[str, dict[str, dict[str, float | int]]]] = {}
    for (user, vc, cls), use in sorted(usage.items()):
        figures = {"gpu_hours": round(use.gpu_hours, 3), "running": use.running}
        users.setdefault(user, {}).setdefault(vc, {})[cls] = figures
    table = {
        "written_at": int(aware_utc(now).timestamp()),
        "window_s": int(WINDOW.total_seconds()),
        "users": users,
        "uids": _uids(users),
    }
    return (
        "-- written by the hivebatch controller each cycle; read by job_submit.lua; do not edit\n"
        f"return {lua_literal(table)}\n"
    )


def _uids(users: Mapping[str, object]) -> dict[int, str]:
    """uid → name of each user in the file: slurmctld names a job's owner by uid only on an update.
    A name this host cannot resolve is left out (its owner then meets the limits at placement only)."""
    out: dict[int, str] = {}
    for name in users:
        try:
            out[pwd.getpwnam(name).pw_uid] = name
        except KeyError:
            continue
    return out


def write_usage(path: Path, text: str) -> None:
    """Replace the file at once (a reader never sees half of it), readable by all, writable by its owner."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
