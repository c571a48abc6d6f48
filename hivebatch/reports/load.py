"""Everything a report command reads, in one place: config, ledger rows, Slurm's live nodes."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hivebatch.config import load_config
from hivebatch.errors import HivebatchError
from hivebatch.reports.gpumap import ClusterMap, GpuSlot, NodeLayout, build_cluster_map
from hivebatch.reports.rows import JobRow, RunSegment, VCInfo, VCNow
from hivebatch.reports.timeutil import parse_since
from hivebatch.reports.topology import node_layouts, vc_infos
from hivebatch.userlimits import StrictLine

DEFAULT_WINDOW = timedelta(days=7)


@dataclass
class ReportData:
    config_path: Path
    config: dict[str, Any]
    vcs: list[VCInfo]
    layouts: list[NodeLayout]
    jobs: list[JobRow] = field(default_factory=list)
    segments: list[RunSegment] = field(default_factory=list)
    slots: list[GpuSlot] = field(default_factory=list)
    slots_taken_at: datetime | None = None
    vc_now: dict[str, VCNow] = field(default_factory=dict)
    has_db: bool = False

    @property
    def total_gpus(self) -> int:
        return sum(len(n.gpu_indices) for n in self.layouts)

    def check_vc(self, vc: str | None) -> None:
        if vc is None:
            return
        known = {v.name for v in self.vcs} | {j.vc for j in self.jobs}
        if vc not in known:
            raise HivebatchError(
                f"unknown VC {vc!r}: the config defines {', '.join(sorted(v.name for v in self.vcs))}"
            )


def load_report_data(
    config: str | None, since: datetime | None = None, with_jobs: bool = True, need_ledger: bool = False
) -> ReportData:
    """The config and what the ledger holds; with ``need_ledger`` a missing or unmigrated ledger is an
    error (a report of nothing would read as an idle, healthy cluster)."""
    from sqlalchemy.exc import SQLAlchemyError

    from hivebatch.db.session import read_only_session
    from hivebatch.reports.source import load_jobs, load_slots

    path, data = load_config(config)
    out = ReportData(config_path=path, config=data, vcs=vc_infos(data), layouts=node_layouts(data))
    with read_only_session(path, data) as session:
        if session is None:
            if need_ledger:
                from hivebatch.db.session import database_url

                raise HivebatchError(
                    f"no hivebatch ledger at {database_url(path, data)}: check database.url in {path} "
                    "(or run `hivebatch db upgrade` and the controller first)"
                )
            return out
        out.has_db = True
        _note_gpu_memory(session, data)
        try:
            if with_jobs:
                out.jobs, out.segments = load_jobs(session, since)
            out.slots, out.slots_taken_at = load_slots(session)
            out.vc_now = load_vc_now(session, data)
        except SQLAlchemyError as exc:
            raise HivebatchError(db_error(exc)) from None
    return out


def _note_gpu_memory(session: Any, data: dict[str, Any]) -> None:
    """GPU memory per node, so GPU slices count their share of a GPU (hivebatch.state.shares.gpu_share)."""
    from hivebatch.cells import parse_cluster_config
    from hivebatch.state.shares import gpu_capacity_by_node

    # a config the cells refuse is reported by its own checks; slices then count as whole GPUs
    with contextlib.suppress(HivebatchError):
        session.info["gpu_capacity_mib"] = gpu_capacity_by_node(parse_cluster_config(data))


def db_error(exc: Exception) -> str:
    first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return f"cannot read the hivebatch database: {first} (is it migrated? run `hivebatch db upgrade`)"


def load_vc_now(session: Any, data: dict[str, Any]) -> dict[str, VCNow]:
    """Each VC as the cell core sees it in the controller's last snapshot; {} when there is none."""
    from hivebatch.db.models import CellSnapshot

    snap = session.get(CellSnapshot, 1)
    if snap is None or not snap.data:
        return {}
    try:
        from hivebatch.cells import CellAllocator, parse_cluster_config

        alloc = CellAllocator.restore(parse_cluster_config(dict(data)), snap.data)
        views = alloc.vc_views()
    except (ImportError, HivebatchError, KeyError, ValueError, TypeError):
        # A snapshot from another hivebatch version or config: the report simply has no "now" column.
        return {}
    return {name: VCNow(name, v.gpus_total, v.gpus_used, v.capacity, v.reason) for name, v in views.items()}


def load_strict_lines(data: ReportData, now: datetime, only_vc: str | None = None) -> list[StrictLine]:
    """Each user's use of the strict classes in the 7 days up to ``now``, beside the config's limits;
    nothing when the config sets none (the classes are then unlimited, and the use is in the users table)."""
    from sqlalchemy.exc import SQLAlchemyError

    from hivebatch.db.session import read_only_session
    from hivebatch.reports.source import ledger_strict_usage
    from hivebatch.userlimits import parse_user_limits, strict_lines

    limits = parse_user_limits(data.config, [v.name for v in data.vcs])
    if limits.empty:
        return []
    with read_only_session(data.config_path, data.config) as session:
        if session is None:
            return []
        _note_gpu_memory(session, data.config)
        try:
            usage = ledger_strict_usage(session, now)
        except SQLAlchemyError as exc:
            raise HivebatchError(db_error(exc)) from None
    return [line for line in strict_lines(limits, usage) if only_vc is None or line.vc == only_vc]


def resolve_window(since_text: str | None, until_text: str | None) -> tuple[datetime | None, datetime]:
    """(since, until); since None means "the default window", settled once the jobs are known."""
    now = datetime.now(UTC)
    until = parse_since(until_text, now) if until_text else now
    since = parse_since(since_text, until) if since_text else None
    if since is not None and since >= until:
        raise HivebatchError("--since must be before --until (or before now)")
    return since, until


def default_since(jobs: list[JobRow], until: datetime) -> datetime:
    """The last 7 days, or less when the ledger is younger (so a new cluster's shares are not diluted)."""
    since = until - DEFAULT_WINDOW
    if jobs:
        first = min(j.submit_time for j in jobs)
        if first > since:
            since = first.replace(minute=0, second=0, microsecond=0)
    return since


def short_error(exc: Exception, limit: int = 120) -> str:
    """Slurm errors repeat every stderr line; the last one says what went wrong."""
    text = str(exc).split("; ")[-1].strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def live_nodes() -> tuple[list[Any] | None, str | None]:
    """Slurm's nodes now, or (None, why not) when Slurm cannot be asked."""
    try:
        from hivebatch.slurm import get_backend

        return list(get_backend().list_nodes()), None
    except HivebatchError as exc:
        return None, f"Slurm not reachable: {short_error(exc)}"
    except (ImportError, AttributeError):
        return None, "no Slurm backend installed"


def live_reservations() -> list[Any]:
    """Slurm's advance reservations now (none when Slurm cannot be asked: the map says so already)."""
    try:
        from hivebatch.slurm import get_backend

        return list(get_backend().list_reservations())
    except (HivebatchError, ImportError, AttributeError):
        return []


def cluster_map(data: ReportData, use_slurm: bool = True) -> tuple[ClusterMap, str]:
    """The GPU map, and a short phrase saying where it came from."""
    job_users = {j.job_id: j.user for j in data.jobs}
    nodes, note = live_nodes() if use_slurm else (None, None)
    source = []
    if data.slots:
        source.append("controller's last cycle")
    if nodes is not None:
        source.append("Slurm now")
    text = " + ".join(source) or "config only"
    if note:
        text += f"; {note}"
    return build_cluster_map(data.layouts, data.slots, nodes, job_users), text
