"""``hivebatch config check``: every section of the config read by the module that owns it, every
problem reported at once (the sections and keys themselves are checked whenever any command loads
the config: :func:`hivebatch.config.load_config`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hivebatch.errors import HivebatchError


def _cells(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.cells import parse_cluster_config

    parse_cluster_config(data)


def _qos(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.qos import ProfileStore, parse_qos_config

    ProfileStore.load(parse_qos_config(data, path.resolve().parent).profiles)


def _sharing(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.cells import parse_cluster_config
    from hivebatch.sharing.config import parse_sharing_config

    spec = parse_cluster_config(data)
    parse_sharing_config(data, {n.name for n in spec.nodes}, set(spec.vcs))


def _user_limits(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.cells import parse_cluster_config
    from hivebatch.userlimits import parse_user_limits

    parse_user_limits(data, parse_cluster_config(data).vcs)


def _controller(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.controller.context import parse_settings

    parse_settings(path, data)


def _database(path: Path, data: dict[str, Any]) -> str | None:
    """The URL must be usable; a SQLite ledger that does not exist yet is said (readers would show
    nothing, and reports refuse to run, until `hivebatch db upgrade` creates it)."""
    from sqlalchemy.engine import make_url

    from hivebatch.db.session import database_url

    url = make_url(database_url(path, data))
    db = url.database if url.get_backend_name() == "sqlite" else None
    if db and db != ":memory:" and not Path(db).exists():
        return f"database.url: no ledger at {db} yet (create it with `hivebatch db upgrade`)"
    return None


def _limits(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.bounds import parse_limits

    parse_limits(data)


def _preemption(path: Path, data: dict[str, Any]) -> None:
    from hivebatch.notice import parse_notice

    parse_notice(data)


CHECKS: dict[str, Callable[[Path, dict[str, Any]], str | None]] = {
    "cluster and virtual_clusters": _cells,
    "qos": _qos,
    "sharing": _sharing,
    "controller": _controller,
    "user_limits": _user_limits,
    "preemption": _preemption,
    "limits": _limits,
    "database": _database,
}


def check_config(path: Path, data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, notes): one line per section that is wrong, and what is worth knowing."""
    problems: list[str] = []
    notes: list[str] = []
    for section, check in CHECKS.items():
        try:
            note = check(path, data)
        except HivebatchError as exc:  # ConfigError is one
            own = str(exc).startswith((section.split()[0], "line "))
            problems.append(str(exc) if own else f"{section}: {exc}")
            continue
        if note:
            notes.append(note)
    return problems, notes
