"""Nodes a job must stay off for a while, because it was pinned there and Slurm did not start it.

Kept in the controller's state (``avoid_nodes``: Slurm job id -> nodes and until when), so a restarted
controller remembers them; entries of jobs no longer waiting, and expired ones, are dropped."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection

from sqlalchemy.orm import Session

from hivebatch.controller.record import set_state
from hivebatch.state.shares import get_state

KEY = "avoid_nodes"
#: how long a job stays off a node where Slurm did not start it, or found it never runnable
AVOID_FOR_S = 3600.0


def _entries(session: Session, now: dt.datetime) -> dict[int, tuple[frozenset[str], dt.datetime]]:
    stored = get_state(session, KEY)
    out: dict[int, tuple[frozenset[str], dt.datetime]] = {}
    for sid, entry in stored.items() if isinstance(stored, dict) else []:
        try:
            until = dt.datetime.fromisoformat(str(entry["until"]))
            out[int(sid)] = (frozenset(str(n) for n in entry["nodes"]), until)
        except (KeyError, TypeError, ValueError):
            continue
    return {sid: e for sid, e in out.items() if e[1] > now}


def _store(
    session: Session, entries: dict[int, tuple[frozenset[str], dt.datetime]], now: dt.datetime
) -> None:
    value = {
        str(sid): {"nodes": sorted(n), "until": u.isoformat()} for sid, (n, u) in sorted(entries.items())
    }
    if value or get_state(session, KEY):
        set_state(session, KEY, value, now)


def load_avoided(session: Session, now: dt.datetime, live: Collection[int]) -> dict[int, frozenset[str]]:
    """The nodes each waiting job avoids now; what no longer applies is dropped from the store."""
    entries = {sid: e for sid, e in _entries(session, now).items() if sid in live}
    _store(session, entries, now)
    return {sid: nodes for sid, (nodes, _until) in entries.items()}


def avoid_nodes(session: Session, slurm_job_id: int, nodes: list[str], now: dt.datetime) -> None:
    entries = _entries(session, now)
    old = entries.get(slurm_job_id, (frozenset(), now))[0]
    entries[slurm_job_id] = (old | frozenset(nodes), now + dt.timedelta(seconds=AVOID_FOR_S))
    _store(session, entries, now)
