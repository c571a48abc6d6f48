"""Trace importers: Philly (Microsoft), Tiresias (60-job sample) and a site's own ``sacct`` history.

Every importer returns trace jobs (``SimJob`` with a GPU count and a duration) plus counts of what was
skipped and why. Durations are run times on the placement each job originally had; the simulator
treats them as the run time on the tightest placement of that GPU count (see ``runtime.py``).
Arrival times are seconds since the first job of the trace.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hivebatch.errors import HivebatchError
from hivebatch.sim.workload import SimJob, class_by_hash, stable_fraction

TRACE_FORMATS = ("philly", "tiresias", "sacct")

# The sacct fields the importer reads. Produce the file with, e.g.:
#   sacct -a -X --parsable2 -S 2026-01-01 -E now \
#         -o JobIDRaw,Account,QOS,Submit,Start,End,ElapsedRaw,AllocTRES,State > history.txt
# The header line is required (columns may come in any order); Submit/Start/End may be ISO times or
# epoch seconds (SLURM_TIME_FORMAT=%s).
SACCT_FIELDS = ("JobIDRaw", "Account", "QOS", "Submit", "Start", "End", "ElapsedRaw", "AllocTRES", "State")
SACCT_REQUIRED = ("Account", "Submit", "ElapsedRaw", "AllocTRES")


@dataclass
class TraceReport:
    rows: int = 0
    used: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def skip(self, why: str) -> None:
        self.skipped[why] += 1

    def summary(self) -> str:
        parts = [f"{self.used} of {self.rows} trace jobs used"]
        parts += [f"{n} skipped: {why}" for why, n in sorted(self.skipped.items())]
        return "; ".join(parts)


def _open_rows(
    path: Path, what: str, required: tuple[str, ...], delimiter: str = ","
) -> Iterator[dict[str, str]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise HivebatchError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    with handle:
        reader = csv.DictReader(handle, delimiter=delimiter)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise HivebatchError(
                f"{path}: not a {what}: missing column(s) {', '.join(missing)} (header has {', '.join(header) or 'nothing'})"
            )
        yield from reader


def _num(value: str | None, path: Path, line: int, column: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise HivebatchError(f"{path} line {line}: {column} must be a number, got {value!r}") from None


def read_vcs(path: str | Path) -> dict[str, int]:
    """``vc,nodes`` (nodes of 8 GPUs) -> {vc: nodes}."""
    p = Path(path)
    out: dict[str, int] = {}
    for line, row in enumerate(_open_rows(p, "VC size file (vc,nodes)", ("vc", "nodes")), start=2):
        nodes = _num(row["nodes"], p, line, "nodes")
        if nodes <= 0 or nodes != int(nodes):
            raise HivebatchError(
                f"{p} line {line}: nodes must be a positive whole number, got {row['nodes']!r}"
            )
        out[row["vc"].strip()] = int(nodes)
    if not out:
        raise HivebatchError(f"{p}: no VCs listed")
    return out


def _rebase(jobs: list[SimJob]) -> list[SimJob]:
    if jobs:
        t0 = min(j.arrival for j in jobs)
        for j in jobs:
            j.arrival -= t0
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    return jobs


def _check_size(job: SimJob, vc_gpus: dict[str, int], report: TraceReport) -> bool:
    if job.vc not in vc_gpus:
        report.skip("VC not in the VC list")
        return False
    if job.gpus > vc_gpus[job.vc]:
        report.skip("larger than its VC")
        return False
    return True


def read_philly(path: str | Path, vc_gpus: dict[str, int]) -> tuple[list[SimJob], TraceReport]:
    """``timestamp,duration,num_gpus,gpu_time,cluster`` (cluster = VC)."""
    p = Path(path)
    report = TraceReport()
    jobs: list[SimJob] = []
    rows = _open_rows(p, "Philly trace", ("timestamp", "duration", "num_gpus", "cluster"))
    for line, row in enumerate(rows, start=2):
        report.rows += 1
        try:
            ts = datetime.strptime(row["timestamp"].strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            raise HivebatchError(f"{p} line {line}: timestamp must look like 2017-09-29 07:58:32") from None
        duration = _num(row["duration"], p, line, "duration")
        gpus = int(_num(row["num_gpus"], p, line, "num_gpus"))
        if duration <= 0 or gpus <= 0:
            report.skip("no GPUs or zero duration")
            continue
        jid = f"ph{line - 1}"
        job = SimJob(
            job_id=jid,
            vc=row["cluster"].strip(),
            cls=class_by_hash(jid),
            arrival=ts.timestamp(),
            gpus=gpus,
            duration_s=duration,
        )
        if _check_size(job, vc_gpus, report):
            jobs.append(job)
    report.used = len(jobs)
    return _rebase(jobs), report


def vc_by_hash(job_id: str, vc_gpus: dict[str, int]) -> str:
    """A VC for a job whose trace names none we know, fixed by its id, in proportion to VC size."""
    names = sorted(vc_gpus)
    x = stable_fraction("vc:" + job_id) * sum(vc_gpus.values())
    acc = 0
    for name in names:
        acc += vc_gpus[name]
        if x < acc:
            return name
    return names[-1]


def read_tiresias(path: str | Path, vc_gpus: dict[str, int]) -> tuple[list[SimJob], TraceReport]:
    """``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``; no VC column, so jobs go
    to VCs by hash, in proportion to VC size."""
    p = Path(path)
    report = TraceReport()
    jobs: list[SimJob] = []
    rows = _open_rows(p, "Tiresias trace", ("job_id", "num_gpu", "submit_time", "model_name", "duration"))
    for line, row in enumerate(rows, start=2):
        report.rows += 1
        gpus = int(_num(row["num_gpu"], p, line, "num_gpu"))
        duration = _num(row["duration"], p, line, "duration")
        arrival = _num(row["submit_time"], p, line, "submit_time")
        if duration <= 0 or gpus <= 0:
            report.skip("no GPUs or zero duration")
            continue
        jid = f"ti{row['job_id'].strip()}"
        job = SimJob(
            job_id=jid,
            vc=vc_by_hash(jid, vc_gpus),
            cls=class_by_hash(jid),
            arrival=arrival,
            gpus=gpus,
            model=row["model_name"].strip() or None,
            duration_s=duration,
        )
        if _check_size(job, vc_gpus, report):
            jobs.append(job)
    report.used = len(jobs)
    return _rebase(jobs), report


_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_QOS_CLASS = {"urgent": "urgent", "prior": "prior", "normal": "normal"}


def _sacct_time(value: str, p: Path, line: int, column: str) -> float | None:
    v = value.strip()
    if not v or v in ("Unknown", "None", "N/A"):
        return None
    if re.fullmatch(r"\d+", v):
        return float(v)
    try:
        return datetime.fromisoformat(v).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise HivebatchError(
            f"{p} line {line}: {column} must be an ISO time or epoch seconds, got {v!r}"
        ) from None


def gpus_from_tres(tres: str) -> int:
    """GPU count from an AllocTRES string such as ``billing=8,cpu=8,gres/gpu=2,mem=64G,node=1``."""
    m = _GPU_TRES.findall(tres)
    return max((int(x) for x in m), default=0)


def read_sacct(path: str | Path, vc_gpus: dict[str, int]) -> tuple[list[SimJob], TraceReport]:
    """``sacct --parsable2`` output with a header line (see SACCT_FIELDS). Account = VC; QOS urgent,
    prior, normal gives the class, QOS opportunistic marks the job opportunistic."""
    p = Path(path)
    report = TraceReport()
    jobs: list[SimJob] = []
    for line, row in enumerate(
        _open_rows(p, "sacct --parsable2 file", SACCT_REQUIRED, delimiter="|"), start=2
    ):
        report.rows += 1
        jid_raw = (row.get("JobIDRaw") or row.get("JobID") or str(line)).strip()
        if "." in jid_raw:  # job steps (123.batch) are not jobs
            report.skip("job step, not a job")
            continue
        gpus = gpus_from_tres(row.get("AllocTRES") or "")
        elapsed = _num(row.get("ElapsedRaw") or "0", p, line, "ElapsedRaw")
        submit = _sacct_time(row["Submit"], p, line, "Submit")
        if gpus <= 0:
            report.skip("no GPUs")
            continue
        if elapsed <= 0 or submit is None:
            report.skip("never ran")
            continue
        qos = (row.get("QOS") or "").strip().lower()
        jid = f"sa{jid_raw}"
        job = SimJob(
            job_id=jid,
            vc=row["Account"].strip(),
            cls=_QOS_CLASS.get(qos, class_by_hash(jid)),
            arrival=submit,
            gpus=gpus,
            duration_s=elapsed,
            opportunistic=qos == "opportunistic",
        )
        if _check_size(job, vc_gpus, report):
            jobs.append(job)
    report.used = len(jobs)
    return _rebase(jobs), report


def read_trace(fmt: str, path: str | Path, vc_gpus: dict[str, int]) -> tuple[list[SimJob], TraceReport]:
    if fmt == "philly":
        return read_philly(path, vc_gpus)
    if fmt == "tiresias":
        return read_tiresias(path, vc_gpus)
    if fmt == "sacct":
        return read_sacct(path, vc_gpus)
    raise HivebatchError(f"unknown trace format {fmt!r}: use one of {', '.join(TRACE_FORMATS)}")
