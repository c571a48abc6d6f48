"""slurmctld's job_submit plugin as the fake Slurm runs it: hivebatch's own job_submit.lua, through Lua.

A fake built with ``job_submit=LuaJobSubmit(config)`` turns a student's GPU ask into the held request
exactly as slurmctld does on the lab; without it, the fake behaves like a Slurm with no plugin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from hivebatch.request import ADMIN_HELD_BEGIN, HELD_BEGIN_AT, OWNER_HOLD_SITE, RELEASED_BEGIN
from hivebatch.slurm.types import SlurmError
from hivebatch.testing.fake_slurm.state import Job

#: the site factor by which the plugin marks an Operator's hold (hivebatch/data/job_submit.lua)
OPERATOR_HOLD_SITE = -1


class JobSubmit(Protocol):
    """The plugin's submit hook: a job_desc in, a verdict (accepted, message, fields) out."""

    def __call__(self, desc: Mapping[str, Any]) -> Any: ...


def run_job_submit(
    plugin: JobSubmit,
    opts: Mapping[str, str],
    user: str,
    default_account: str | None,
    tres_per_node: str,
    script: str | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[str, str, bool]:
    """What the plugin makes of a submission: (GRES left on the job, admin comment, held by it)."""
    from hivebatch.testing.lua_job_submit import job_desc

    verdict = plugin(job_desc(opts, user, default_account, tres_per_node, script, env))
    if not verdict.accepted:
        raise SlurmError(
            ["sbatch"],
            1,
            f"sbatch: error: {verdict.message}\nsbatch: error: Batch job submission failed: Unspecified error",
        )
    comment = verdict.fields.get("admin_comment", "")
    return verdict.fields.get("tres_per_node", tres_per_node), comment, bool(comment)


def park_owner_release(j: Job) -> None:
    """job_modify: an owner (or an Operator) releasing an unplaced GPU job leaves it behind the plugin's far
    begin time."""
    if j.admin_comment and "gpu" not in j.tres_per_node and "shard" not in j.tres_per_node:
        j.eligible_at = datetime.fromtimestamp(RELEASED_BEGIN, tz=UTC)


def park_kept_pin(j: Job) -> None:
    """job_modify: the controller's hold of a waiting GPU job that kept an earlier pin's GPUs parks it, so
    an admin's release cannot start it there."""
    if j.admin_comment and ("gpu" in j.tres_per_node or "shard" in j.tres_per_node):
        j.eligible_at = datetime.fromtimestamp(RELEASED_BEGIN, tz=UTC)


def mark_owner_hold(j: Job) -> None:
    """job_modify: an owner holding a pending GPU job marks it with the plugin's hold begin time and, for
    a job that is no array's record, its site factor (an array's records the controller marks)."""
    if j.admin_comment:
        j.eligible_at = HELD_BEGIN_AT
        if j.array_job_id is None and j.site_factor == 0:
            j.site_factor = OWNER_HOLD_SITE


def mark_admin_hold(j: Job) -> None:
    """job_modify: an Operator's own hold of a pending GPU job (not the controller's) is marked for the
    controller to leave, in its begin time and, where the owner's hold cannot undo it, its site factor."""
    if j.admin_comment:
        j.eligible_at = datetime.fromtimestamp(ADMIN_HELD_BEGIN, tz=UTC)
        if j.site_factor == 0:
            j.site_factor = OPERATOR_HOLD_SITE


def unmark_operator_hold(j: Job) -> None:
    """job_modify: an Operator's release, or the controller's hold, ends a hold's mark (-1 an Operator's,
    -3 its owner's)."""
    if j.admin_comment and j.site_factor in (OPERATOR_HOLD_SITE, OWNER_HOLD_SITE):
        j.site_factor = 0


def operator_held(j: Job) -> bool:
    return bool(j.admin_comment) and j.site_factor == OPERATOR_HOLD_SITE


def note_start(path: Path | None, j: Job, begin: datetime, now: datetime) -> bool:
    """job_modify: the start time an owner set on a waiting job, noted for the controller as the plugin
    notes it (``note_start``); False where there is no notes file."""
    if path is None:
        return False
    line = {
        "t": int(now.timestamp()),
        "job": j.job_id,
        "uid": 1000,
        "begin": int(begin.timestamp()),
    }
    with path.open("a") as f:
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return True


def start_time_over_mark(j: Job) -> bool:
    """job_modify: a start time the owner sets over a mark is noted and leaves Slurm's begin time, for a
    waiting job that is not an array's (``start_time`` in the plugin)."""
    pinned = "gpu" in j.tres_per_node or "shard" in j.tres_per_node
    return bool(j.admin_comment) and not pinned and not j.array_job_id


def start_time_free(j: Job) -> bool:
    """job_modify: whether the owner may set the job's start time (``start_time_free`` in the plugin):
    while the plugin's own hold keeps a waiting job, or once a pinned one is released; not over a hold's
    mark (its site factor), nor after a release the controller has not taken back (no longer held)."""
    if not j.admin_comment:
        return True
    pinned = "gpu" in j.tres_per_node or "shard" in j.tres_per_node
    if pinned:
        return not j.held
    return j.held and j.site_factor == 0
