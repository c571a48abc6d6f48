"""What ``hq`` shows: Slurm's view of the jobs merged with the controller's ledger (read-only).

Slurm is the truth for what runs now (state, nodes, GPU indices); the DB adds what only hivebatch
knows (predicted start and finish, slack against the class's ECT, why a job waits). Before the
controller ever ran there is no DB, and rows carry what Slurm and the job's comment say.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from hivebatch.request import RELEASED_BEGIN_AT, request_of
from hivebatch.state.jobstates import FINAL_TO_SLURM, SLURM_ACTIVE_STATES, SLURM_STATE_CODES, WAITING_STATES

STATE_CODES = SLURM_STATE_CODES
CODE_STATES = {v: k for k, v in STATE_CODES.items()}

SLURM_REASONS = {
    "JobHeldAdmin": "held by hivebatch until the controller places it",
    "JobHeldUser": "held by its owner (scontrol release {job} to let it go)",
    "Priority": "released; Slurm starts it at its next scheduling pass",
    # the controller pinned it to GPUs it found free; Slurm lacks something else on those nodes, or a
    # job told to leave its GPUs has not left yet (seen on the lab: a CPU job took the node's CPUs
    # between the placing and Slurm's start, tests/fixtures/slurm/squeue_pending_reasons.json)
    "Resources": "released; Slurm waits for room beside its GPUs (CPUs or memory other jobs hold, a job told to leave them, or a job of higher priority it keeps the node for)",
    "Dependency": "waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "its dependency can never be met: cancel it",
    "BeginTime": "waiting for its --begin time",
    "BadConstraints": "Slurm cannot meet its node request",
    "job_requeued_in_held_state": "preempted and requeued; waiting to be placed again",
    "launch failed requeued held": "its start failed; requeued and held",
    "ReqNodeNotAvail": "a node it was given is not available",
    "QOSMaxGRESPerUser": "its class's per-user GPU limit is reached",
    "AssocGrpGRES": "its virtual cluster's GPU limit is reached",
}
# a job hivebatch never held (no GPUs, the Operator's) waits in Slurm's own queue: "released" and
# "its GPUs" would be wrong for it
PLAIN_JOB_REASONS = {
    **SLURM_REASONS,
    "Priority": "waiting for jobs of higher priority",
    "Resources": "waiting for resources to be freed",
}


def requeued_reason(eligible: dt.datetime | None) -> str:
    """squeue says BeginTime for a requeued job too: Slurm lets it start again only once the credential
    of its last run has expired (AuthInfo's cred_expire, 120 s by default), whether or not it had a --begin."""
    at = f" at {eligible.astimezone(dt.UTC):%H:%M:%S} UTC" if eligible else ""
    return f"requeued; Slurm lets it start again{at}, once its last run's credential expires"


def plain_reason(reason: str | None, hivebatch: bool = True, job: str = "JOBID") -> str | None:
    """Slurm's reason code in plain words (unknown codes are shown as Slurm gives them); ``hivebatch``
    False: the job never went through the controller. ``job``: its id as hq shows it, for a command to type."""
    if not reason or reason in ("None", "(null)"):
        return None
    for code, words in (SLURM_REASONS if hivebatch else PLAIN_JOB_REASONS).items():
        if reason == code or reason.startswith(code + ",") or reason.startswith(code + " "):
            return words.replace("{job}", job)
    return reason


@dataclass
class JobRow:
    job_id: int
    name: str | None = None
    user: str | None = None
    vc: str | None = None
    qos: str | None = None
    state: str = "PENDING"  # Slurm's state name
    hivebatch_state: str | None = None  # the ledger's state, when the controller has seen the job
    gpus: int = 0
    gpu_type: str | None = None
    placement: dict[str, list[int]] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)  # where Slurm runs it (a job without GPUs too)
    submit_time: dt.datetime | None = None
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    predicted_start: dt.datetime | None = None
    predicted_end: dt.datetime | None = None
    expected_completion: dt.datetime | None = None
    slack_s: float | None = None
    time_limit_s: int | None = None
    reason: str | None = None
    hivebatch: bool = True  # submitted through hsub
    gpu_mem_mib: int | None = None  # --gpu-mem: a slice of one GPU (or the memory used per whole GPU)
    gpu_total_mib: int | None = None  # memory of one such GPU, from the config (for ``8G/32G``)
    display_id: str = ""  # squeue's JOBID: ``123_4`` for an array task, ``123_[5-9%2]`` for its pending rest
    slurm_reason: str | None = None  # squeue's own reason code
    slurm_expected_start: dt.datetime | None = None  # a pending job's start as slurmctld expects it

    @property
    def is_slice(self) -> bool:
        return bool(
            self.gpu_mem_mib
            and self.gpus == 1
            and self.gpu_total_mib
            and self.gpu_mem_mib < self.gpu_total_mib
        )

    @property
    def state_code(self) -> str:
        return STATE_CODES.get(self.state, self.state[:2])

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD")

    @property
    def expected_start(self) -> dt.datetime | None:
        """A waiting job's start as hq shows it: hivebatch's prediction, else Slurm's own (a --begin time)."""
        return (self.predicted_start or self.slurm_expected_start) if self.pending else None

    def to_json(self) -> dict[str, Any]:
        def iso(t: dt.datetime | None) -> str | None:
            return None if t is None else t.replace(microsecond=0).isoformat() + "Z"

        return {
            "job_id": self.job_id,
            "display_id": self.display_id or str(self.job_id),
            "name": self.name,
            "user": self.user,
            "vc": self.vc,
            "qos": self.qos,
            "state": self.state,
            "hivebatch_state": self.hivebatch_state,
            "gpus": self.gpus,
            "gpu_type": self.gpu_type,
            "placement": {n: sorted(g) for n, g in sorted(self.placement.items())},
            "submit_time": iso(self.submit_time),
            "start_time": iso(self.start_time),
            "end_time": iso(self.end_time),
            "predicted_start": iso(self.predicted_start),
            "predicted_end": iso(self.predicted_end),
            "expected_completion": iso(self.expected_completion),
            "slack_s": None if self.slack_s is None else round(self.slack_s, 1),
            "time_limit_s": self.time_limit_s,
            "reason": self.reason,
            "gpu_mem_mib": self.gpu_mem_mib,
            "gpu_total_mib": self.gpu_total_mib,
        }


def _naive_utc(t: dt.datetime | None) -> dt.datetime | None:
    if t is None:
        return None
    if t.tzinfo is not None:
        return t.astimezone(dt.UTC).replace(tzinfo=None)
    return t


# a job hivebatch holds that the controller's ledger says nothing of (yet)
NOT_SEEN_YET = "waiting for the hivebatch controller to look at it"
# the same, when hq had no configuration to find the ledger by: whether the controller has looked is unknown
NO_LEDGER = "held for hivebatch: set HIVEBATCH_CONFIG (or --config) to read the controller's reason"


def row_from_slurm(job: Any) -> JobRow:
    """A row from a SlurmJob alone (the request in its comment fills in VC, class and GPUs)."""
    req = request_of(job)
    gpus_map = {n: sorted(g) for n, g in (getattr(job, "gpus", None) or {}).items() if g}
    if not gpus_map:  # a job sharing GPUs holds shards of them: show the GPUs it shares
        gpus_map = {n: sorted(s) for n, s in (getattr(job, "shards", None) or {}).items() if s}
    row = JobRow(
        job_id=int(job.job_id),
        name=job.name,
        user=job.user,
        vc=req.vc if req else job.account,
        qos=req.qos if req else job.qos,
        state=str(job.state).upper(),
        gpus=req.gpus if req else sum(len(g) for g in gpus_map.values()),
        gpu_type=req.gpu_type if req else None,
        placement=gpus_map,
        nodes=list(getattr(job, "nodes", None) or []) if str(job.state).upper() != "PENDING" else [],
        submit_time=_naive_utc(job.submit_time),
        start_time=_naive_utc(job.start_time) if str(job.state).upper() != "PENDING" else None,
        end_time=_naive_utc(job.end_time) if str(job.state).upper() not in ("PENDING", "RUNNING") else None,
        time_limit_s=job.time_limit_s,
        hivebatch=req is not None,
        gpu_mem_mib=req.gpu_mem_mib if req else None,
        display_id=str(getattr(job, "display_id", "") or ""),
    )
    if row.pending:
        row.placement = {}
        row.slurm_reason = job.reason
        expected = _naive_utc(getattr(job, "expected_start", None))
        row.slurm_expected_start = None if _plugin_mark(expected) else expected
        row.reason = plain_reason(
            job.reason, hivebatch=req is not None, job=row.display_id or str(job.job_id)
        )
        if job.reason == "BeginTime" and getattr(job, "restarts", 0):
            row.reason = requeued_reason(getattr(job, "eligible_time", None))
        marked = _plugin_mark(_naive_utc(getattr(job, "eligible_time", None)))
        # the plugin's holds, and its begin-time mark on a job its owner released (seen on the lab: hq
        # said "waiting for its --begin time" of a job submitted without one)
        if req is not None and (job.reason in ("JobHeldAdmin", "JobHeldUser") or marked):
            row.reason = NOT_SEEN_YET
    elif row.state == "RUNNING" and row.start_time and row.time_limit_s:
        row.predicted_end = row.start_time + dt.timedelta(seconds=row.time_limit_s)
    return row


def merge_ledger(row: JobRow | None, db_job: Any, start_timeout_s: float | None = None) -> JobRow:
    """Add the controller's view of one job to the Slurm row (or make a row for a job Slurm forgot).
    ``start_timeout_s``: how long the controller lets Slurm take to start a placed job."""
    if row is None:
        row = JobRow(
            job_id=int(db_job.slurm_job_id),
            name=db_job.name,
            user=db_job.user,
            vc=db_job.vc_name or db_job.account,
            qos=db_job.qos,
            state=FINAL_TO_SLURM.get(
                db_job.state, "PENDING" if db_job.state in WAITING_STATES else "RUNNING"
            ),
            gpus=db_job.gpus or 0,
            gpu_type=db_job.gpu_type,
            placement={n: sorted(g) for n, g in (db_job.placement or {}).items()},
            submit_time=db_job.submit_time,
            start_time=db_job.start_time,
            end_time=db_job.end_time,
            hivebatch=not db_job.foreign,
        )
    row.hivebatch_state = db_job.state
    if isinstance(db_job.request, dict) and not db_job.foreign:
        # the ledger's ask is the job's: its owner may have changed it since submit (owner_ask.py),
        # and a new ask that names no type drops the one the admin comment still carries
        row.gpus = db_job.gpus or row.gpus
        row.gpu_type = db_job.request.get("gpu_type")
        mem = db_job.request.get("gpu_mem_mib")
        row.gpu_mem_mib = int(mem) if mem else None
    row.vc = row.vc or db_job.vc_name
    row.qos = row.qos or db_job.qos
    row.gpu_type = row.gpu_type or db_job.gpu_type
    if not row.gpus:
        row.gpus = db_job.gpus or 0
    row.expected_completion = db_job.expected_completion
    row.slack_s = db_job.slack_s
    if row.state == "RUNNING":
        row.reason = row.reason or (db_job.reason if db_job.state == "running" else None)
        row.predicted_start = row.start_time or db_job.predicted_start
        row.predicted_end = db_job.predicted_end or row.predicted_end
        if not row.placement and db_job.placement:
            row.placement = {n: sorted(g) for n, g in db_job.placement.items()}
    elif row.pending:
        row.predicted_start = db_job.predicted_start
        row.predicted_end = db_job.predicted_end
        if db_job.state == "placed" and db_job.placement:
            # placed and released: Slurm has not started it yet, but its GPUs are chosen
            row.placement = {n: sorted(g) for n, g in db_job.placement.items()}
            _slurms_start(row)
            if row.slurm_reason == "Resources" and db_job.placed_at is not None and start_timeout_s:
                by = _naive_utc(db_job.placed_at) + dt.timedelta(seconds=start_timeout_s)
                row.reason = (
                    f"{row.reason}; hivebatch places it elsewhere if it has not started by {by:%H:%M:%S} UTC"
                )
        if db_job.reason and db_job.state in WAITING_STATES:
            row.reason = db_job.reason
    else:
        row.predicted_end = row.predicted_end or db_job.predicted_end
        if not row.placement and db_job.placement:
            row.placement = {n: sorted(g) for n, g in db_job.placement.items()}
        if db_job.state in ("failed", "cancelled") and db_job.reason:
            row.reason = db_job.reason
    if row.expected_completion and row.predicted_end and row.state in ("PENDING", "RUNNING"):
        row.slack_s = (row.expected_completion - row.predicted_end).total_seconds()
    return row


def _plugin_mark(t: dt.datetime | None) -> bool:
    """``t`` is one of the plugin's begin-time marks (in 2100), which Slurm also shows as the job's
    expected start: neither a begin time its owner gave nor a start."""
    return t is not None and t >= RELEASED_BEGIN_AT


def _slurms_start(row: JobRow) -> None:
    """A placed job Slurm has not started: once its GPUs are chosen, slurmctld's own estimate is the
    better start (seen on the lab: pinned to a node whose CPUs a CPU-only job took, hq showed START
    "now" while squeue --start said 13:45:55, when that job ended)."""
    expected = row.slurm_expected_start
    if expected is None or row.predicted_start is None or expected <= row.predicted_start:
        return
    if row.predicted_end is not None:
        row.predicted_end += expected - row.predicted_start
    row.predicted_start = expected


@dataclass
class Filters:
    users: set[str] | None = None
    accounts: set[str] | None = None
    qos: set[str] | None = None
    states: set[str] | None = None  # Slurm state names; None = active ones
    job_ids: set[int] | None = None
    all_states: bool = False

    def keep(self, row: JobRow) -> bool:
        if self.job_ids is not None and row.job_id not in self.job_ids:
            return False
        if self.users is not None and row.user not in self.users:
            return False
        if self.accounts is not None and row.vc not in self.accounts:
            return False
        if self.qos is not None and row.qos not in self.qos:
            return False
        if self.all_states:
            return True
        if self.states is not None:
            return row.state in self.states
        # like squeue: active jobs, plus any job asked for by id
        return row.state in SLURM_ACTIVE_STATES or self.job_ids is not None


def parse_states(text: str, source: str = "-t/--states") -> tuple[set[str] | None, bool]:
    """squeue's -t: names or codes, comma-separated; ``all`` means every state. ``source``: where the
    text came from, for the error (SQUEUE_STATES reads as -t)."""
    from hivebatch.errors import HivebatchError

    states: set[str] = set()
    for part in text.split(","):
        p = part.strip().upper()
        if not p:
            continue
        if p == "ALL":
            return None, True
        if p in STATE_CODES:
            states.add(p)
        elif p in CODE_STATES:
            states.add(CODE_STATES[p])
        else:
            raise HivebatchError(
                f"{source}: unknown state {part.strip()!r} (e.g. PENDING, RUNNING, PD, R, all)"
            )
    return states, False


def collect_rows(
    slurm_jobs: Iterable[Any],
    db_jobs: Iterable[Any],
    filters: Filters,
    ledger_found: bool = True,
    start_timeout_s: float | None = None,
    grace_s: float = 0.0,
) -> list[JobRow]:
    """Slurm's rows with the ledger's view merged in; ``ledger_found`` False: there was no config to
    find a ledger by, so a held job's reason cannot be told. ``start_timeout_s``: the controller's
    (``controller.start_timeout_s``), to say when a placed job Slurm has not started is placed again;
    ``grace_s``: the notice Slurm gives opportunistic jobs it preempts, which the controller adds to
    that bound for a job pinned where one is leaving (decide.unstarted.grace_on)."""
    db_jobs = list(db_jobs)
    leaving: dict[str, list[Any]] = {}
    for d in db_jobs:
        if _told_by_slurm(d):
            for n in d.placement or {}:
                leaving.setdefault(n, []).append(d)
    rows: dict[int, JobRow] = {}
    for job in slurm_jobs:
        row = row_from_slurm(job)
        if not ledger_found and row.reason == NOT_SEEN_YET:
            row.reason = NO_LEDGER
        rows[int(job.job_id)] = row
    for db_job in db_jobs:
        jid = int(db_job.slurm_job_id)
        bound = start_timeout_s
        if bound and leaving.keys() & set(db_job.placement or {}):
            bound += grace_s
        row = rows[jid] = merge_ledger(rows.get(jid), db_job, bound)
        told = _leaving_first(db_job, leaving)
        if told and row.slurm_reason == "Resources":
            row.reason = f"{row.reason}; {told}"
    kept = [r for r in rows.values() if filters.keep(r)]
    # like squeue: running first, then pending by predicted start, then by id
    order = {"RUNNING": 0, "COMPLETING": 1, "PENDING": 2}
    far = dt.datetime.max
    return sorted(kept, key=lambda r: (order.get(r.state, 3), r.predicted_start or far, r.job_id))


def _told_by_slurm(db_job: Any) -> bool:
    """A running opportunistic job Slurm preempts, in its grace (controller.slurm_grace)."""
    return db_job.state == "running" and db_job.notice_until is not None and db_job.notice_by is None


def _leaving_first(db_job: Any, leaving: dict[str, list[Any]]) -> str:
    """For a placed job, the opportunistic jobs on its nodes Slurm lets run out their notice first."""
    if db_job.state != "placed":
        return ""
    told = {d.slurm_job_id: d.notice_until for n in db_job.placement or {} for d in leaving.get(n, [])}
    return "; ".join(
        f"job {sid} leaves by {_naive_utc(until):%H:%M:%S} UTC at the latest (Slurm's notice to it)"
        for sid, until in sorted(told.items())
    )


def expand_arrays(rows: list[JobRow]) -> list[JobRow]:
    """squeue's ``-r``: the record of an array's pending tasks becomes one row per task."""
    from hivebatch.slurm.arrays import array_tasks
    from hivebatch.slurm.types import SlurmError

    out: list[JobRow] = []
    for row in rows:
        base, _, rest = row.display_id.partition("_[")
        if not rest:
            out.append(row)
            continue
        try:
            tasks, _limit = array_tasks(rest.rstrip("]"))
        except SlurmError:
            out.append(row)
            continue
        out.extend(replace(row, display_id=f"{base}_{t}") for t in tasks)
    return out
