"""An in-memory Slurm for unit tests that answers like the lab (same states, reasons and refusals).

It is a real alternative backend, not a mock: it keeps a consistent cluster state, applies the same
permission rules as Slurm with accounting (owners vs. Operators, admin holds), and reproduces the lab's
quirks that hivebatch must live with (re-typing a typed GRES keeps the old GPUs too; a NodeList longer
than the node count leaves the job in BadConstraints).

Driving it from a test::

    fake = FakeSlurm()                                  # node1..node4 × 8 GPUs, 32 shards each
    jid = fake.as_user("alice").submit("#!/bin/sh\\n", ["--hold", "-A", "cv"])
    fake.as_user("hbctl").update_pending(jid, ["node2"], 1, "gpu:g3:1,gpu:g5:1")
    fake.as_user("hbctl").release(jid)                  # starts at once (auto_schedule=True)
    fake.job(jid).gpus                                  # {"node2": [3, 5]}
    fake.finish(jid)  /  fake.fail(jid, exit_code=2)    # → COMPLETED / FAILED
    fake.set_node_state("node3", "DRAIN", "fan")        # sinfo shows it bad; "IDLE" resumes it
    fake.advance(60)                                    # the fake clock moves on

``auto_schedule=False`` leaves released jobs PENDING until ``fake.schedule()`` or ``fake.start(jid)``.

Like the lab (preempt/qos, PreemptMode=REQUEUE), a job of another QOS that only fits on GPUs held by
``opportunistic`` jobs requeues them: they go back to PENDING with reason ``BeginTime`` and may start again
after REQUEUE_DELAY_S (also after a requeue-hold). Finished jobs leave ``list_jobs`` MIN_JOB_AGE_S after
their end (``history`` keeps them).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.parse import expand_hostlist, split_gres
from hivebatch.slurm.types import FINISHED_STATES, AcctRecord, SlurmError, SlurmJob, SlurmNode

QOS_NAMES = ("urgent", "prior", "normal", "opportunistic")
PREEMPTABLE_QOS = "opportunistic"
#: seconds before a preempted (requeued) job may start again
REQUEUE_DELAY_S = 10
#: finished jobs stay visible in squeue this long (the lab's MinJobAge)
MIN_JOB_AGE_S = 300
_OPTS_WITH_VALUE = {
    "-J": "name",
    "--job-name": "name",
    "-A": "account",
    "--account": "account",
    "-q": "qos",
    "--qos": "qos",
    "--comment": "comment",
    "-N": "nodes",
    "--nodes": "nodes",
    "--gres": "gres",
    "-w": "nodelist",
    "--nodelist": "nodelist",
    "-t": "time",
    "--time": "time",
    "-p": "partition",
    "--partition": "partition",
    "-o": None,
    "--output": None,
    "-e": None,
    "--error": None,
    "-D": None,
    "--chdir": None,
    "--open-mode": None,
    "--export": None,
    "--mem": None,
    "-c": None,
    "--cpus-per-task": None,
    "-n": None,
    "--ntasks": None,
    "--ntasks-per-node": None,
    "--signal": None,
    "--mail-type": None,
    "--begin": None,
    "--dependency": None,
    "-d": None,
    "--wckey": None,
    "--gpus": "gpus",
    "-G": "gpus",
}
_FLAGS = {
    "-H": "hold",
    "--hold": "hold",
    "--parsable": None,
    "--requeue": None,
    "--no-requeue": None,
    "--exclusive": None,
    "--test-only": "test_only",
    "-Q": None,
    "--quiet": None,
}


@dataclass
class _Job:
    job_id: int
    user: str
    name: str
    account: str
    qos: str
    comment: str
    num_nodes: int
    tres_per_node: str
    required_nodes: list[str]
    time_limit_s: int | None
    submit_time: datetime
    state: str = "PENDING"
    reason: str = "None"
    nodes: list[str] = field(default_factory=list)
    gpus: dict[str, list[int]] = field(default_factory=dict)
    shards: dict[str, dict[int, int]] = field(default_factory=dict)
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_code: str | None = None
    restarts: int = 0
    eligible_at: datetime | None = None
    script: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.reason in (
            "JobHeldUser",
            "JobHeldAdmin",
            "job_requeued_in_held_state",
        )


@dataclass
class _Node:
    name: str
    gpus: int
    shards_per_gpu: int
    state: str = "IDLE"  # IDLE | DOWN | DRAIN
    reason: str = ""


class _State:
    def __init__(self, nodes: list[_Node], clock: Callable[[], datetime] | None, auto_schedule: bool) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.jobs: dict[int, _Job] = {}
        self.next_id = 1
        self._offset = timedelta()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.auto_schedule = auto_schedule
        self.calls: list[tuple[str, str, tuple[object, ...]]] = []

    def now(self) -> datetime:
        return (self._clock() + self._offset).replace(microsecond=0)


class FakeSlurm(SlurmBackend):
    """A Slurm cluster in memory. Views made with ``as_user`` share one state."""

    name = "fake"

    def __init__(
        self,
        nodes: Iterable[str] | dict[str, int] | None = None,
        gpus_per_node: int = 8,
        shards_per_gpu: int = 32,
        user: str = "root",
        operators: Iterable[str] = ("hbctl",),
        accounts: dict[str, list[str]] | None = None,
        clock: Callable[[], datetime] | None = None,
        auto_schedule: bool = True,
        _state: _State | None = None,
    ) -> None:
        if _state is None:
            spec = (
                nodes
                if isinstance(nodes, dict)
                else {n: gpus_per_node for n in (nodes or [f"node{i}" for i in range(1, 5)])}
            )
            _state = _State([_Node(n, g, shards_per_gpu) for n, g in spec.items()], clock, auto_schedule)
        self._s = _state
        self.user = user
        self.operators = set(operators)
        #: user -> accounts they may submit to; None accepts any account (like a lab without slurmdbd)
        self.accounts = accounts

    def as_user(self, user: str) -> FakeSlurm:
        return FakeSlurm(user=user, operators=self.operators, accounts=self.accounts, _state=self._s)

    # --- test controls ---------------------------------------------------------------------------

    @property
    def calls(self) -> list[tuple[str, str, tuple[object, ...]]]:
        """Every backend call made: (user, method, args) — for asserting what a controller did."""
        return self._s.calls

    def job(self, job_id: int) -> SlurmJob:
        return self._view(self._get(job_id, "squeue"))

    def advance(self, seconds: float) -> None:
        """Move the fake clock on (and let waiting jobs start, when auto_schedule)."""
        self._s._offset += timedelta(seconds=seconds)
        self._maybe_schedule()

    def now(self) -> datetime:
        return self._s.now()

    def start(self, job_id: int, nodes: list[str] | None = None, gpus: list[int] | None = None) -> None:
        """Start a pending job now: on its pinned nodes/GPUs, or on the ones given, or wherever it fits."""
        j = self._get(job_id, "start")
        if j.state != "PENDING":
            raise SlurmError(["start"], 1, f"Job is no longer pending execution for job {job_id}")
        if nodes is not None:
            j.required_nodes = list(nodes)
            j.num_nodes = len(nodes)
        if gpus is not None:
            j.tres_per_node = ",".join(f"gres:gpu:g{i}:1" for i in gpus)
        if j.held:
            j.reason = "None"
        if not self._try_start(j):
            raise SlurmError(["start"], 1, f"job {job_id} does not fit: {j.reason}")

    def finish(self, job_id: int, exit_code: int = 0) -> None:
        self._end(job_id, "COMPLETED" if exit_code == 0 else "FAILED", f"{exit_code}:0")

    def fail(self, job_id: int, exit_code: int = 1) -> None:
        self._end(job_id, "FAILED", f"{exit_code}:0", reason="NonZeroExitCode")

    def timeout(self, job_id: int) -> None:
        self._end(job_id, "TIMEOUT", "0:15", reason="TimeLimit")

    def set_node_state(self, node: str, state: str, reason: str = "") -> None:
        """'DOWN' or 'DRAIN' make a node bad (jobs there keep running); 'IDLE'/'RESUME' make it good."""
        n = self._s.nodes[node]
        state = state.upper()
        if state not in ("DOWN", "DRAIN", "IDLE", "RESUME"):
            raise ValueError(f"unknown node state {state}")
        n.state = "IDLE" if state == "RESUME" else state
        n.reason = reason if n.state != "IDLE" else ""
        self._maybe_schedule()

    def schedule(self) -> list[int]:
        """Start every runnable pending job in submit order, like slurmctld's next pass; returns started ids."""
        started = []
        for j in sorted(self._s.jobs.values(), key=lambda x: x.job_id):
            if j.state == "PENDING" and not j.held and j.reason != "BadConstraints" and self._try_start(j):
                started.append(j.job_id)
        return started

    # --- backend interface -----------------------------------------------------------------------

    def submit(self, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None) -> int:
        self._log("submit", tuple(sbatch_args))
        if not script_text.startswith("#!"):
            raise SlurmError(["sbatch"], 1, "sbatch: error: This does not look like a batch script.")
        opts = self._parse_sbatch(_sbatch_lines(script_text) + list(sbatch_args))
        qos = opts.get("qos") or "normal"
        if qos not in QOS_NAMES:
            raise SlurmError(
                ["sbatch"], 1, "sbatch: error: Batch job submission failed: Invalid qos specification"
            )
        allowed = None if self.accounts is None else self.accounts.get(self.user)
        account = opts.get("account") or (allowed[0] if allowed else "root")
        if (
            self.accounts is not None
            and self.user not in self.operators | {"root"}
            and account not in (allowed or [])
        ):
            raise SlurmError(
                ["sbatch"],
                1,
                "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
            )
        nodelist = expand_hostlist(opts.get("nodelist"))
        num_nodes = int(str(opts.get("nodes") or len(nodelist) or 1).split("-")[0])
        gres = opts.get("gres") or ""
        if opts.get("gpus"):
            gres = ",".join(x for x in (gres, f"gpu:{opts['gpus']}") if x)
        jid = self._s.next_id
        self._s.next_id += 1
        j = _Job(
            job_id=jid,
            user=self.user,
            name=opts.get("name") or "sbatch",
            account=account,
            qos=qos,
            comment=opts.get("comment") or "",
            num_nodes=num_nodes,
            tres_per_node=",".join(f"gres:{g}" for g in gres.split(",") if g),
            required_nodes=nodelist,
            time_limit_s=_time_limit(opts.get("time")),
            submit_time=self._s.now(),
            script=script_text,
            env=dict(env or {}),
        )
        if opts.get("hold"):
            j.reason = "JobHeldUser" if not self._is_admin() else "JobHeldAdmin"
        self._s.jobs[jid] = j
        self._maybe_schedule()
        return jid

    def update_pending(
        self,
        job_id: int,
        nodelist: list[str] | None = None,
        num_nodes: int | None = None,
        gres: str | None = None,
    ) -> None:
        self._log("update_pending", (job_id, nodelist, num_nodes, gres))
        cmd = ["scontrol", "update", f"JobId={job_id}"]
        j = self._touchable(job_id, cmd)
        if j.state != "PENDING":
            raise SlurmError(cmd, 1, f"Job is no longer pending execution for job {job_id}")
        if nodelist is not None and any(n not in self._s.nodes for n in nodelist):
            raise SlurmError(cmd, 1, f"Invalid node name specified for job {job_id}")
        if gres is not None:
            j.tres_per_node = self._retype(j, gres, cmd)
        if nodelist is not None:
            j.required_nodes = list(nodelist)
        if num_nodes is not None:
            j.num_nodes = int(num_nodes)
        if j.required_nodes and len(j.required_nodes) > j.num_nodes:
            # Slurm accepts it, and the job can never start
            j.reason = "BadConstraints" if not j.held else j.reason
        elif j.reason == "BadConstraints":
            j.reason = "None"
        self._maybe_schedule()

    def release(self, job_id: int) -> None:
        self._log("release", (job_id,))
        cmd = ["scontrol", "release", str(job_id)]
        j = self._touchable(job_id, cmd)
        _refuse_finished(j, cmd)
        if j.reason == "JobHeldAdmin" and not self._is_admin():
            raise SlurmError(
                cmd,
                1,
                f"Access/permission denied for job {job_id}\nslurm_suspend error: Access/permission denied",
            )
        if j.held:
            bad = j.required_nodes and len(j.required_nodes) > j.num_nodes
            j.reason = "BadConstraints" if bad else "None"
        self._maybe_schedule()

    def hold(self, job_id: int) -> None:
        self._log("hold", (job_id,))
        cmd = ["scontrol", "hold", str(job_id)]
        j = self._touchable(job_id, cmd)
        _refuse_finished(j, cmd)
        if j.state != "PENDING":
            raise SlurmError(cmd, 1, f"Job is no longer pending execution for job {job_id}")
        j.reason = "JobHeldAdmin" if self._is_admin() else "JobHeldUser"

    def requeue_hold(self, job_id: int) -> None:
        self._log("requeue_hold", (job_id,))
        cmd = ["scontrol", "requeuehold", str(job_id)]
        j = self._touchable(job_id, cmd)
        if j.state == "PENDING":
            raise SlurmError(cmd, 1, f"Job is pending execution for job {job_id}")
        if j.state in FINISHED_STATES:
            raise SlurmError(cmd, 1, f"Job has already finished for job {job_id}")
        # keeps its GRES and node list, loses the running allocation
        j.state, j.reason = "PENDING", "job_requeued_in_held_state"
        j.nodes, j.gpus, j.shards, j.start_time = [], {}, {}, None
        j.restarts += 1
        j.eligible_at = self._s.now() + timedelta(seconds=REQUEUE_DELAY_S)

    def cancel(self, job_id: int) -> None:
        self._log("cancel", (job_id,))
        cmd = ["scancel", str(job_id)]
        j = self._s.jobs.get(int(job_id))
        if j is None or j.state in FINISHED_STATES:
            return  # scancel is silent about unknown and finished jobs
        if not self._may_touch(j):
            raise SlurmError(
                cmd, 210, f"scancel: error: Kill job error on job id {job_id}: Access/permission denied"
            )
        was_running = j.state == "RUNNING"
        j.state, j.reason, j.exit_code = "CANCELLED", "None", "0:15"
        j.end_time = self._s.now()
        if not was_running:
            j.nodes, j.gpus, j.shards = [], {}, {}
        self._maybe_schedule()

    def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
        wanted = None if job_ids is None else {int(x) for x in job_ids}
        horizon = self._s.now() - timedelta(seconds=MIN_JOB_AGE_S)
        return [
            self._view(j)
            for j in self._s.jobs.values()
            if (wanted is None or j.job_id in wanted) and not (j.end_time and j.end_time < horizon)
        ]

    def list_nodes(self) -> list[SlurmNode]:
        out = []
        for n in self._s.nodes.values():
            used: set[int] = set()
            shared: set[int] = set()
            for j in self._s.jobs.values():
                if j.state == "RUNNING":
                    used.update(j.gpus.get(n.name, []))
                    shared.update(j.shards.get(n.name, {}))
            busy = any(j.state == "RUNNING" and n.name in j.nodes for j in self._s.jobs.values())
            base = {"DOWN": "DOWN"}.get(n.state, "MIXED" if busy else "IDLE")
            state = base + ("+DRAIN" if n.state == "DRAIN" else "")
            out.append(
                SlurmNode(
                    name=n.name,
                    state=state,
                    bad=n.state in ("DOWN", "DRAIN"),
                    gpu_indices=list(range(n.gpus)),
                    gpus_used=sorted(used),
                    gpus_shared=sorted(shared),
                    reason=n.reason,
                )
            )
        return out

    def list_accounts(self) -> list[str]:
        if self.accounts is None:
            return ["root"]
        return sorted({a for accts in self.accounts.values() for a in accts} | {"root"})

    def list_qos(self) -> list[str]:
        return sorted(QOS_NAMES)

    def history(self, job_ids: list[int] | None = None, since: datetime | None = None) -> list[AcctRecord]:
        out = []
        for j in self._s.jobs.values():
            if job_ids is not None and j.job_id not in set(job_ids):
                continue
            if since is not None and (j.end_time or self._s.now()) < since:
                continue
            end = j.end_time
            elapsed = int(((end or self._s.now()) - j.start_time).total_seconds()) if j.start_time else 0
            out.append(
                AcctRecord(
                    job_id=j.job_id,
                    name=j.name,
                    user=j.user,
                    account=j.account,
                    qos=j.qos,
                    state=j.state,
                    submit_time=j.submit_time,
                    start_time=j.start_time,
                    end_time=end,
                    elapsed_s=elapsed,
                    nodes=list(j.nodes),
                    gpus={k: list(v) for k, v in j.gpus.items()},
                    comment=j.comment,
                    exit_code=j.exit_code or "0:0",
                )
            )
        return out

    # --- internals -------------------------------------------------------------------------------

    def _log(self, method: str, args: tuple[object, ...]) -> None:
        self._s.calls.append((self.user, method, args))

    def _is_admin(self) -> bool:
        return self.user == "root" or self.user in self.operators

    def _may_touch(self, j: _Job) -> bool:
        return self._is_admin() or j.user == self.user

    def _get(self, job_id: int, what: str) -> _Job:
        j = self._s.jobs.get(int(job_id))
        if j is None:
            raise SlurmError([what, str(job_id)], 1, f"Invalid job id specified for job {job_id}")
        return j

    def _touchable(self, job_id: int, cmd: list[str]) -> _Job:
        j = self._s.jobs.get(int(job_id))
        if j is None:
            raise SlurmError(cmd, 1, f"Invalid job id specified for job {job_id}")
        if not self._may_touch(j):
            raise SlurmError(
                cmd, 1, f"Invalid user id for job {job_id}\nslurm_suspend error: Invalid user id"
            )
        return j

    def _retype(self, j: _Job, gres: str, cmd: list[str]) -> str:
        old = split_gres(j.tres_per_node)
        new = split_gres(gres)
        old_typed = {(n, t) for n, t, _, _ in old if n == "gpu" and t}
        old_untyped = [t is None for n, t, _, _ in old if n == "gpu"]
        new_untyped = [t is None for n, t, _, _ in new if n == "gpu"]
        if old_untyped and new_untyped and any(old_untyped) != any(new_untyped):
            raise SlurmError(
                cmd,
                1,
                f"Invalid GRES specification (with and without type identification) for job {j.job_id}",
            )
        items = [f"gres:{n}:{t}:{c}" if t else f"gres:{n}:{c}" for n, t, c, _ in new]
        # Slurm 22.05 quirk: re-typing a typed GPU gres keeps the old types as well
        for n, t in sorted(old_typed, key=lambda x: x[1] or ""):
            if not any(nn == n and tt == t for nn, tt, _, _ in new):
                items.append(f"gres:{n}:{t}:1")
        return ",".join(items)

    def _maybe_schedule(self) -> None:
        if self._s.auto_schedule:
            self.schedule()

    def _busy(self, skip_qos: str | None = None) -> tuple[dict[str, set[int]], dict[str, dict[int, int]]]:
        gpus: dict[str, set[int]] = {n: set() for n in self._s.nodes}
        shards: dict[str, dict[int, int]] = {n: {} for n in self._s.nodes}
        for j in self._s.jobs.values():
            if j.state == "RUNNING" and j.qos != skip_qos:
                for node, idx in j.gpus.items():
                    gpus[node].update(idx)
                for node, sh in j.shards.items():
                    for i, c in sh.items():
                        shards[node][i] = shards[node].get(i, 0) + c
        return gpus, shards

    def _fit(
        self, j: _Job, node: str, gpus_busy: set[int], shards_busy: dict[int, int]
    ) -> tuple[list[int], dict[int, int]] | None:
        n = self._s.nodes[node]
        if n.state != "IDLE":
            return None
        want_gpus: list[int] = []
        want_shards: dict[int, int] = {}
        untyped = 0
        for name, gtype, count, _ in split_gres(j.tres_per_node):
            idx = int(gtype[1:]) if gtype and gtype.startswith("g") and gtype[1:].isdigit() else None
            if name == "gpu":
                if idx is None:
                    untyped += count
                else:
                    want_gpus.append(idx)
            elif name == "shard" and idx is not None:
                want_shards[idx] = want_shards.get(idx, 0) + count
        for i in want_gpus:
            if i >= n.gpus or i in gpus_busy or shards_busy.get(i):
                return None
        for i, c in want_shards.items():
            if i >= n.gpus or i in gpus_busy or shards_busy.get(i, 0) + c > n.shards_per_gpu:
                return None
        free = [
            i for i in range(n.gpus) if i not in gpus_busy and not shards_busy.get(i) and i not in want_gpus
        ]
        if untyped > len(free):
            return None
        return sorted(want_gpus + free[:untyped]), want_shards

    def _placement(
        self, j: _Job, skip_qos: str | None = None
    ) -> dict[str, tuple[list[int], dict[int, int]]] | None:
        gpus_busy, shards_busy = self._busy(skip_qos)
        candidates = list(j.required_nodes) or list(self._s.nodes)
        chosen: dict[str, tuple[list[int], dict[int, int]]] = {}
        for node in candidates:
            fit = self._fit(j, node, gpus_busy[node], shards_busy[node])
            if fit is not None:
                chosen[node] = fit
            elif j.required_nodes:
                break
            if len(chosen) == j.num_nodes:
                break
        if len(chosen) < j.num_nodes or (j.required_nodes and set(chosen) != set(j.required_nodes)):
            return None
        return chosen

    def _try_start(self, j: _Job) -> bool:
        if j.required_nodes and len(j.required_nodes) > j.num_nodes:
            j.reason = "BadConstraints"
            return False
        if j.eligible_at and j.eligible_at > self._s.now():
            j.reason = "BeginTime"
            return False
        chosen = self._placement(j)
        if chosen is None and j.qos != PREEMPTABLE_QOS:
            # preempt/qos with PreemptMode=REQUEUE: opportunistic jobs in the way go back to the queue
            chosen = self._placement(j, skip_qos=PREEMPTABLE_QOS)
            if chosen is not None:
                self._requeue_in_the_way(chosen)
        if chosen is None:
            j.reason = "Resources"
            return False
        j.state, j.reason = "RUNNING", "None"
        j.nodes = list(chosen)
        j.gpus = {n: g for n, (g, _) in chosen.items() if g}
        j.shards = {n: s for n, (_, s) in chosen.items() if s}
        j.start_time = self._s.now()
        return True

    def _requeue_in_the_way(self, chosen: dict[str, tuple[list[int], dict[int, int]]]) -> None:
        for other in self._s.jobs.values():
            if other.state != "RUNNING" or other.qos != PREEMPTABLE_QOS:
                continue
            clash = any(
                set(other.gpus.get(node, [])) & (set(g) | set(s))
                or set(other.shards.get(node, {})) & (set(g) | set(s))
                for node, (g, s) in chosen.items()
            )
            if clash:
                # a requeued job may start again only after a delay (the lab: AuthInfo=cred_expire=10)
                other.state, other.reason = "PENDING", "BeginTime"
                other.nodes, other.gpus, other.shards, other.start_time = [], {}, {}, None
                other.restarts += 1
                other.eligible_at = self._s.now() + timedelta(seconds=REQUEUE_DELAY_S)

    def _end(self, job_id: int, state: str, exit_code: str, reason: str = "None") -> None:
        j = self._get(job_id, "end")
        if j.state != "RUNNING":
            raise SlurmError(["end", str(job_id)], 1, f"job {job_id} is {j.state}, not RUNNING")
        j.state, j.reason, j.exit_code, j.end_time = state, reason, exit_code, self._s.now()
        self._maybe_schedule()

    def _view(self, j: _Job) -> SlurmJob:
        return SlurmJob(
            job_id=j.job_id,
            name=j.name,
            user=j.user,
            account=j.account,
            qos=j.qos,
            state=j.state,
            reason=j.reason,
            nodes=list(j.nodes) if j.state != "PENDING" else [],
            gpus={k: list(v) for k, v in j.gpus.items()},
            shards={k: dict(v) for k, v in j.shards.items()},
            comment=j.comment,
            submit_time=j.submit_time,
            start_time=j.start_time if j.state != "PENDING" else None,
            end_time=j.end_time if j.state in FINISHED_STATES else None,
            time_limit_s=j.time_limit_s,
            num_nodes=j.num_nodes,
            held=j.held,
            exit_code=j.exit_code if j.state in FINISHED_STATES else None,
            tres_per_node=j.tres_per_node,
            required_nodes=list(j.required_nodes),
            partition="gpu",
            priority=0 if j.held else 1000,
        )

    def _parse_sbatch(self, args: list[str]) -> dict[str, str]:
        opts: dict[str, str] = {}
        i = 0
        while i < len(args):
            a = args[i]
            key, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
            if key in _FLAGS and not eq:
                if _FLAGS[key]:
                    opts[_FLAGS[key] or ""] = "1"
                i += 1
                continue
            if key in _OPTS_WITH_VALUE:
                if not eq:
                    if i + 1 >= len(args):
                        raise SlurmError(["sbatch"], 1, f"sbatch: option '{key}' requires an argument")
                    val = args[i + 1]
                    i += 1
                dest = _OPTS_WITH_VALUE[key]
                if dest:
                    opts[dest] = val
                i += 1
                continue
            raise SlurmError(["sbatch"], 1, f"sbatch: unrecognized option '{a}'")
        return opts


def _sbatch_lines(script: str) -> list[str]:
    """#SBATCH options at the top of a script, before the first command (as sbatch reads them)."""
    out: list[str] = []
    for line in script.splitlines()[1:]:
        s = line.strip()
        if s.startswith("#SBATCH"):
            out += shlex.split(s[len("#SBATCH") :], comments=True)
        elif s and not s.startswith("#"):
            break
    return out


def _time_limit(text: str | None) -> int | None:
    """Slurm time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS → seconds."""
    if not text or text.upper() in ("INFINITE", "UNLIMITED"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


__all__ = ["FakeSlurm", "QOS_NAMES"]


def _refuse_finished(j: _Job, cmd: list[str]) -> None:
    """scontrol hold/release of a finished job, as 22.05 words it."""
    if j.state in FINISHED_STATES:
        raise SlurmError(
            cmd,
            1,
            f"Job has already finished for job {j.job_id}\nslurm_suspend error: Job has already finished",
        )
