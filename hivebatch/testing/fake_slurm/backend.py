"""The fake Slurm's backend interface and test controls (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from hivebatch.request import HELD_BEGIN_AT, OWNER_HOLD_SITE
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.parse import expand_hostlist, split_gres
from hivebatch.slurm.types import (
    CONTROLLER_UNREACHABLE,
    FINISHED_STATES,
    SIGNAL_TARGETS,
    AcctRecord,
    Partition,
    Reservation,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
)
from hivebatch.testing.fake_slurm.arrays import make_array, split_task
from hivebatch.testing.fake_slurm.plugin import (
    JobSubmit,
    mark_admin_hold,
    mark_owner_hold,
    note_start,
    operator_held,
    park_kept_pin,
    park_owner_release,
    run_job_submit,
    start_time_free,
    start_time_over_mark,
    unmark_operator_hold,
)
from hivebatch.testing.fake_slurm.sbatch import (
    begin_offset_s,
    min_cpus,
    parse_sbatch,
    sbatch_lines,
    size_mb,
    time_limit,
)
from hivebatch.testing.fake_slurm.scheduler import singleton_status, site_kills_invalid_dep, try_start
from hivebatch.testing.fake_slurm.state import (
    MIN_JOB_AGE_S,
    QOS_NAMES,
    Job,
    Node,
    State,
    cpus_on_a_node,
    mem_on_a_node,
    refuse_finished,
)
from hivebatch.testing.fake_slurm.views import squeue_view


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
        job_submit: JobSubmit | None = None,
        _state: State | None = None,
    ) -> None:
        if _state is None:
            spec = (
                nodes
                if isinstance(nodes, dict)
                else {n: gpus_per_node for n in (nodes or [f"node{i}" for i in range(1, 5)])}
            )
            _state = State([Node(n, g, shards_per_gpu) for n, g in spec.items()], clock, auto_schedule)
        if job_submit is not None:
            _state.job_submit = job_submit
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
        return squeue_view(self._s, self._get(job_id, "squeue"))

    def never_runnable_on(self, job_id: int, nodes: list[str]) -> None:
        """Make Slurm's scheduler find the job never runnable when pinned to any of ``nodes``, for a need
        the fake does not model (on the lab: ``-N 1 -n 32 --overcommit --gres=gpu:1``)."""
        self._get(job_id, "never_runnable_on").never_on = frozenset(nodes)

    def as_interactive(self, job_id: int) -> None:
        """Make a job one an srun or salloc waits for in a terminal (the fake submits only batch scripts)."""
        self._get(job_id, "srun").batch = False

    def terminal(self, job_id: int) -> list[str]:
        """What ``scontrol notify`` printed in the terminal of an interactive job's srun or salloc."""
        return list(self._get(job_id, "terminal").told)

    def signals_sent(self, job_id: int) -> list[tuple[str, str]]:
        """(signal, target) of every scancel --signal the job received, in order."""
        return list(self._get(job_id, "signals").signals)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        """What root can do with ``scontrol update AdminComment=`` (and only root or the plugin)."""
        self._get(job_id, "scontrol").admin_comment = text

    def set_time_limit(self, job_id: int, seconds: int) -> None:
        """``scontrol update TimeLimit=``: an owner may lower it, also while the job runs, and only an
        operator may raise it (tests/fixtures/slurm/time_limit_owner_update.txt)."""
        cmd = ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={-(-seconds // 60)}"]
        j = self._get(job_id, "scontrol")
        if self.user not in self.operators and (j.time_limit_s is None or seconds > j.time_limit_s):
            raise SlurmError(cmd, 1, f"Access/permission denied for job {job_id}")
        j.time_limit_s = seconds

    def set_qos(self, job_id: int, qos: str) -> None:
        """An owner moving a pending job to another QOS they are granted (``scontrol update QOS=``)."""
        self._get(job_id, "scontrol").qos = qos

    def set_account(self, job_id: int, account: str) -> None:
        """An owner moving a pending job to another account they belong to (``scontrol update Account=``);
        the job_submit plugin refuses it once the job's GPUs are chosen."""
        cmd = ["scontrol", "update", f"JobId={job_id}", f"Account={account}"]
        j = self._get(job_id, "scontrol")
        mine = self.accounts.get(j.user) if self.accounts is not None else None
        if j.state != "PENDING" or (mine is not None and account not in mine):
            raise SlurmError(
                cmd, 1, f"Invalid account or account/partition combination specified for job {job_id}"
            )
        if (
            self._s.job_submit is not None
            and j.admin_comment
            and ("gpu" in j.tres_per_node or "shard" in j.tres_per_node)
        ):
            raise SlurmError(cmd, 1, f"Access/permission denied for job {job_id}")
        j.account = account

    def advance(self, seconds: float) -> None:
        """Move the fake clock on (and let waiting jobs start, when auto_schedule); jobs whose grace
        ended are requeued first."""
        self._s._offset += timedelta(seconds=seconds)
        now = self._s.now()
        for j in self._s.jobs.values():
            if j.state == "RUNNING" and j.grace_end is not None and j.grace_end <= now:
                j.requeue(now, "BeginTime")
        self._maybe_schedule()

    def set_qos_grace(self, qos: str, seconds: int) -> None:
        """``sacctmgr modify qos … set GraceTime=seconds`` (hadmin slurm-config: the config's notice)."""
        self._s.qos_grace[qos] = seconds

    def preempt_with_grace(self, job_id: int, grace_s: float | None = None) -> None:
        """Slurm preempts a running job (preempt/qos) for the CPUs or memory of another, which the fake
        does not schedule by: it runs on for its QOS's GraceTime (or ``grace_s``), shown with its
        preempt_time, and is requeued when that ends (tests/fixtures/slurm/preempt_grace.txt)."""
        j = self._get(job_id, "preempt")
        if j.state != "RUNNING":
            raise SlurmError(["preempt", str(job_id)], 1, f"job {job_id} is {j.state}, not RUNNING")
        j.start_grace(self._s.now(), self._s.qos_grace.get(j.qos, 0) if grace_s is None else grace_s)

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
        if not try_start(self._s, j):
            raise SlurmError(["start"], 1, f"job {job_id} does not fit: {j.reason}")

    def finish(self, job_id: int, exit_code: int = 0) -> None:
        self._end(job_id, "COMPLETED" if exit_code == 0 else "FAILED", f"{exit_code}:0")

    def fail(self, job_id: int, exit_code: int = 1) -> None:
        self._end(job_id, "FAILED", f"{exit_code}:0", reason="NonZeroExitCode")

    def timeout(self, job_id: int) -> None:
        self._end(job_id, "TIMEOUT", "0:15", reason="TimeLimit")

    def requeue(self, job_id: int) -> None:
        """Slurm requeues a running job not held (a node failure, an admin's ``scontrol requeue``): back to
        PENDING behind its short requeue delay, its GRES kept."""
        j = self._get(job_id, "requeue")
        if j.state != "RUNNING":
            raise SlurmError(["requeue", str(job_id)], 1, f"job {job_id} is {j.state}, not RUNNING")
        j.requeue(self._s.now(), "BeginTime")

    def reserve(self, name: str, nodes: list[str], start_in_s: float, duration_s: float) -> None:
        """An admin's ``scontrol create reservation`` of whole nodes, starting ``start_in_s`` from now."""
        start = self._s.now().replace(tzinfo=None) + timedelta(seconds=start_in_s)
        self._s.reservations.append(
            Reservation(name, start, start + timedelta(seconds=duration_s), tuple(nodes))
        )

    def set_qos_gpu_limit(self, qos: str, per_user: int) -> None:
        """An admin's ``sacctmgr modify qos QOS set MaxTRESPerUser=gres/gpu=N``."""
        self._s.qos_max_gpus_per_user[qos] = per_user

    def set_partition_state(self, name: str, state: str) -> None:
        """An admin's ``scontrol update PartitionName=… State=…``."""
        self._s.partitions[name] = state.upper()
        self._maybe_schedule()

    def list_partitions(self) -> list[Partition]:
        self._answering("scontrol show partition", "Unspecified error")
        return [Partition(name, state, tuple(self._s.nodes)) for name, state in self._s.partitions.items()]

    def list_reservations(self) -> list[Reservation]:
        self._answering("scontrol show reservation", "Unspecified error")
        now = self._s.now().replace(tzinfo=None)
        return [r for r in self._s.reservations if r.end > now]

    def set_node_state(self, node: str, state: str, reason: str = "") -> None:
        """'DOWN' or 'DRAIN' make a node bad (jobs there keep running); 'IDLE'/'RESUME' make it good."""
        n = self._s.nodes[node]
        state = state.upper()
        if state not in ("DOWN", "DRAIN", "IDLE", "RESUME"):
            raise ValueError(f"unknown node state {state}")
        n.state = "IDLE" if state == "RESUME" else state
        n.reason = reason if n.state != "IDLE" else ""
        self._maybe_schedule()

    def misplace(self, job_id: int, gpus: dict[str, list[int]]) -> None:
        """Run a running job on other GPU indices than it was granted — seen once on the lab right after
        a slurmctld restart ("gres count underflow" in its log)."""
        self._get(job_id, "misplace").gpus = {n: sorted(v) for n, v in gpus.items()}

    def stop_controller(self) -> None:
        """slurmctld stops: squeue/sinfo answer with an error (as the lab's exit 0 + ``errors``), every
        other command fails as on the lab; running jobs go on running."""
        self._s.controller_up = False

    def start_controller(self, register: bool = False) -> None:
        """slurmctld is back; its nodes stay UNKNOWN, their GRES unused, until ``register_nodes()``
        (the lab takes a few seconds), unless ``register``."""
        self._s.controller_up = True
        for n in self._s.nodes.values():
            n.registered = register

    def register_nodes(self) -> None:
        for n in self._s.nodes.values():
            n.registered = True
        self._maybe_schedule()

    def schedule(self) -> list[int]:
        """Start every runnable pending job in submit order, like slurmctld's next pass; returns started ids."""
        started = []
        for j in sorted(self._s.jobs.values(), key=lambda x: x.job_id):
            if j.state == "PENDING" and not j.held and j.reason != "BadConstraints" and try_start(self._s, j):
                started.append(j.job_id)
        return started

    # --- backend interface -----------------------------------------------------------------------

    def submit(self, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None) -> int:
        self._log("submit", tuple(sbatch_args))
        if not script_text.startswith("#!"):
            raise SlurmError(["sbatch"], 1, "sbatch: error: This does not look like a batch script.")
        opts = parse_sbatch(sbatch_lines(script_text) + list(sbatch_args))
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
        if opts.get("gpus_per_node"):
            gres = ",".join(x for x in (gres, f"gpu:{opts['gpus_per_node']}") if x)
        tres_per_node = ",".join(f"gres:{g}" for g in gres.split(",") if g)
        admin_comment, held = "", bool(opts.get("hold"))
        # sbatch turns now+N into one time, which the plugin sees and slurmctld keeps: read the clock once
        begin_at = None
        if opts.get("begin", "").startswith("now+"):
            begin_at = self._s.now() + timedelta(seconds=begin_offset_s(opts["begin"]))
        if self._s.job_submit is not None and not self._is_admin():
            default = allowed[0] if allowed else None
            seen = dict(opts)
            if begin_at is not None:  # job_desc's begin_time, which the plugin records
                seen["begin_epoch"] = str(int(begin_at.timestamp()))
            tres_per_node, admin_comment, by_plugin = run_job_submit(
                self._s.job_submit, seen, self.user, default, tres_per_node, script_text, env
            )
            held = held or by_plugin
        elif opts.get("gpus"):
            tres_per_node = ",".join(x for x in (tres_per_node, f"gres:gpu:{opts['gpus']}") if x)
        jid = self._s.next_id
        self._s.next_id += 1
        j = Job(
            job_id=jid,
            user=self.user,
            name=opts.get("name") or "sbatch",
            account=account,
            qos=qos,
            comment=opts.get("comment") or "",
            num_nodes=num_nodes,
            tres_per_node=tres_per_node,
            admin_comment=admin_comment,
            dependency=opts.get("dependency") or "",
            kill_invalid_dep=_yes_no(opts.get("kill_invalid_dep")),
            required_nodes=nodelist,
            time_limit_s=time_limit(opts.get("time")),
            submit_time=self._s.now(),
            script=script_text,
            env=dict(env or {}),
        )
        if opts.get("cpus_per_task"):  # MinCPUsNode: a task's CPUs times the tasks on one node
            j.cpus_per_node = int(opts["cpus_per_task"]) * int(opts.get("ntasks_per_node") or 1)
        if opts.get("mem_per_cpu"):
            j.mem_per_cpu_mb = size_mb(opts["mem_per_cpu"], "--mem-per-cpu")
        if opts.get("tmp"):
            j.tmp_disk_mb = size_mb(opts["tmp"])
        if opts.get("ntasks"):  # squeue's tasks and cpus
            j.tasks = int(opts["ntasks"])
            j.cpus_total = min_cpus(opts, num_nodes)
        if opts.get("array"):
            make_array(j, opts["array"])
        if begin_at is not None:
            j.eligible_at = begin_at
        if opts.get("deadline", "").startswith("now+"):
            j.deadline = self._s.now() + timedelta(seconds=begin_offset_s(opts["deadline"]))
        j.time_min_s = time_limit(opts["time_min"]) if opts.get("time_min") else None
        if held:
            # a hold set at submit, by the user or by the job_submit plugin, is a user hold on 22.05
            j.reason = "JobHeldUser" if not self._is_admin() else "JobHeldAdmin"
        self._s.jobs[jid] = j
        if j.dependency == "singleton":
            singleton_status(self._s, j, held_too=True)  # slurmctld tests it at submission, held or not
        self._maybe_schedule()
        return jid

    def update_pending(
        self,
        job_id: int,
        nodelist: list[str] | None = None,
        num_nodes: int | None = None,
        gres: str | None = None,
        min_cpus_per_node: int | None = None,
        min_mem_per_node_mb: int | None = None,
        tasks_per_node: int | None = None,
    ) -> None:
        per_node = (min_cpus_per_node, min_mem_per_node_mb, tasks_per_node)
        self._log("update_pending", (job_id, nodelist, num_nodes, gres, *(per_node if any(per_node) else ())))
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
            if j.tasks > j.cpus_total > 0:
                # an overcommitted job's CPUs counted again, task by task: where they do not fit, Slurm
                # finds it can never run (BadConstraints: overcommit.txt)
                j.cpus_total = j.tasks * max(j.cpus_per_node, 1)
                room = sum(self._s.nodes[n].cpus for n in j.required_nodes if n in self._s.nodes)
                if j.required_nodes and j.cpus_total > room:
                    j.never_on = frozenset(j.required_nodes)
        if min_cpus_per_node is not None:
            j.cpus_per_node = int(min_cpus_per_node)
        if min_mem_per_node_mb is not None:
            j.mem_per_node_mb = int(min_mem_per_node_mb)
        if tasks_per_node is not None:
            j.tasks_per_node = int(tasks_per_node)
        if j.required_nodes and len(j.required_nodes) > j.num_nodes:
            # Slurm accepts it, and the job can never start
            j.reason = "BadConstraints" if not j.held else j.reason
        elif j.reason == "BadConstraints":
            j.reason = "None"
        self._maybe_schedule()

    def split_array_task(self, array_job_id: int, task_id: int) -> None:
        self._log("split_array_task", (array_job_id, task_id))
        # as slurmctld: holding one task gives it a record of its own, held by whoever held it
        self.hold(split_task(self._s, array_job_id, task_id).job_id)

    def release(self, job_id: int) -> None:
        cmd = ["scontrol", "release", str(job_id)]
        j = self._unfinished("release", job_id, cmd)
        if j.reason == "JobHeldAdmin" and not self._is_admin():
            raise SlurmError(
                cmd,
                1,
                f"Access/permission denied for job {job_id}\nslurm_suspend error: Access/permission denied",
            )
        if j.held:
            bad = j.required_nodes and len(j.required_nodes) > j.num_nodes
            j.reason = "BadConstraints" if bad else "None"
            j.held_by_slurm = False
            if self._s.job_submit is not None:  # an Operator's release of an unpinned job too
                park_owner_release(j)
                if self._is_admin():  # the plugin writes no site factor on an owner's update
                    unmark_operator_hold(j)
        self._maybe_schedule()

    def clear_dependency(self, job_id: int) -> None:
        cmd = ["scontrol", "update", f"JobId={job_id}", "Dependency="]
        self._unfinished("clear_dependency", job_id, cmd).dependency = ""
        self._maybe_schedule()

    def clear_begin_time(self, job_id: int, to: datetime | None = None) -> None:
        cmd = ["scontrol", "update", f"JobId={job_id}", f"StartTime={to or 'now'}"]
        j = self._unfinished("clear_begin_time", job_id, cmd)
        j.eligible_at = to if to is not None and to > self._s.now() else None
        self._maybe_schedule()

    def set_start_time(self, job_id: int, when: datetime | None) -> None:
        """A user's ``scontrol update JobId=N StartTime=...`` (None: ``now``), as the plugin lets it through."""
        cmd = ["scontrol", "update", f"JobId={job_id}", f"StartTime={when or 'now'}"]
        j = self._unfinished("set_start_time", job_id, cmd)
        if self._s.job_submit is not None and not self._is_admin() and j.admin_comment:
            free = start_time_free(j)
            noted = (
                j.state == "PENDING"
                and start_time_over_mark(j)
                and note_start(self._s.notes_path, j, when or self._s.now(), self._s.now())
            )
            if not free and not noted:
                raise SlurmError(cmd, 1, f"Access/permission denied for job {job_id}")
            if not free:
                return  # the mark stays; the controller keeps the time
        j.eligible_at = when if when is not None and when > self._s.now() else None
        self._maybe_schedule()

    def plugin_notes(self, path: Path) -> None:
        """Where the job_submit plugin notes owners' updates (``controller.refusals_file``)."""
        self._s.notes_path = path

    def mark_owner_hold(self, job_id: int) -> None:
        self._log("mark_owner_hold", (job_id,))
        cmd = ["scontrol", "update", f"JobId={job_id}", f"StartTime={HELD_BEGIN_AT:%Y-%m-%dT%H:%M:%S}"]
        j = self._unfinished("mark_owner_hold", job_id, cmd)
        j.eligible_at = HELD_BEGIN_AT

    def hold(self, job_id: int) -> None:
        j = self._pending_to_hold(job_id)
        if self._is_admin():  # the controller's hold
            j.reason = "JobHeldAdmin"
            if self._s.job_submit is not None:
                park_kept_pin(j)
                unmark_operator_hold(j)
            return
        # as slurmctld: a non-Operator's hold of a job held already (priority 0) leaves Slurm's hold as it is
        # (tests/fixtures/slurm/owner_hold_of_held.txt)
        was_held = j.held
        if not was_held:
            j.reason = "JobHeldUser"
        if self._s.job_submit is not None and not (was_held and operator_held(j)):
            mark_owner_hold(j)

    def admin_hold(self, job_id: int) -> None:
        """An admin's own ``scontrol hold`` (the controller's hold() carries the begin time the plugin drops)."""
        j = self._pending_to_hold(job_id)
        j.reason = "JobHeldAdmin"
        if self._s.job_submit is not None:
            mark_admin_hold(j)

    def guard_owner_hold(self, job_id: int) -> None:
        cmd = ["scontrol", "update", f"JobId={job_id}", f"SiteFactor={OWNER_HOLD_SITE}"]
        j = self._unfinished("guard_owner_hold", job_id, cmd)
        j.site_factor = OWNER_HOLD_SITE

    def user_hold(self, job_id: int) -> None:
        self._log("user_hold", (job_id,))
        j = self._pending_to_hold(job_id)
        if not self._is_admin():
            self.hold(job_id)
            return
        j.reason = "JobHeldUser"
        if self._s.job_submit is not None:  # to the plugin, an Operator's hold as any other
            mark_admin_hold(j)

    def _pending_to_hold(self, job_id: int) -> Job:
        cmd = ["scontrol", "hold", str(job_id)]
        j = self._unfinished("hold", job_id, cmd)
        if j.state != "PENDING":
            raise SlurmError(cmd, 1, f"Job is no longer pending execution for job {job_id}")
        return j

    def requeue_hold(self, job_id: int) -> None:
        self._log("requeue_hold", (job_id,))
        cmd = ["scontrol", "requeuehold", str(job_id)]
        j = self._touchable(job_id, cmd)
        if j.state == "PENDING":
            raise SlurmError(cmd, 1, f"Job is pending execution for job {job_id}")
        # a finished batch job Slurm still lists is requeued too (recorded on the lab: COMPLETED, FAILED
        # and CANCELLED jobs all go back to PENDING, held)
        # keeps its GRES and node list, loses the running allocation
        j.requeue(self._s.now(), "job_requeued_in_held_state")

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

    def signal(self, job_id: int, signal: str, target: str) -> None:
        self._log("signal", (job_id, signal, target))
        cmd = ["scancel", *SIGNAL_TARGETS[target], f"--signal={signal}", str(job_id)]
        j = self._touchable(job_id, cmd)
        if j.state in FINISHED_STATES:
            raise SlurmError(
                cmd, 1, f"scancel: error: Kill job error on job id {job_id}: Invalid job id specified"
            )
        if j.state != "RUNNING":
            why = "Job can not be altered now, try again later"
            raise SlurmError(cmd, 228, f"scancel: error: Kill job error on job id {job_id}: {why}")
        j.signals.append((signal, target))

    def notify(self, job_id: int, message: str) -> None:
        # recorded: tests/fixtures/slurm/notify_pending_interactive.txt
        self._log("notify", (job_id, message))
        cmd = ["scontrol", "notify", str(job_id), message]
        j = self._s.jobs.get(int(job_id))
        if j is None:
            raise SlurmError(cmd, 1, "job notify failure: Invalid job id specified")
        if j.state in FINISHED_STATES:
            raise SlurmError(cmd, 1, "job notify failure: Job/step already completing or completed")
        if j.user != self.user and not self.may_notify_others():
            raise SlurmError(cmd, 1, "job notify failure: Invalid user id")
        if j.batch and j.state != "RUNNING":
            raise SlurmError(cmd, 1, "job notify failure: Requested operation is presently disabled")
        j.told.append(message)

    def may_notify_others(self) -> bool:
        return self.user in ("root", "slurm")  # the fake's SlurmUser is slurm

    def ping(self) -> None:
        if not self._s.controller_up:
            raise SlurmUnavailable(["scontrol", "ping"], "Slurmctld(primary) at fake is DOWN", 1)

    def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
        self._answering("squeue --json", "Failed while looking for jobs [slurm_load_jobs]")
        wanted = None if job_ids is None else {int(x) for x in job_ids}
        horizon = self._s.now() - timedelta(seconds=MIN_JOB_AGE_S)
        return [
            squeue_view(self._s, j)
            for j in self._s.jobs.values()
            if (wanted is None or j.job_id in wanted) and not (j.end_time and j.end_time < horizon)
        ]

    def list_nodes(self) -> list[SlurmNode]:
        self._answering("sinfo --json", "Unspecified error")
        out = []
        running_on: dict[str, list[Job]] = {}  # one pass over the jobs, not one per node
        for j in self._s.jobs.values():
            if j.state == "RUNNING":
                for name in {*j.nodes, *j.gpus, *j.shards}:
                    running_on.setdefault(name, []).append(j)
        for n in self._s.nodes.values():
            if not n.registered:
                out.append(SlurmNode(n.name, "UNKNOWN", True, list(range(n.gpus))))
                continue
            used: set[int] = set()
            shared: set[int] = set()
            for j in running_on.get(n.name, []):
                used.update(j.gpus.get(n.name, []))
                shared.update(j.shards.get(n.name, {}))
            running = [j for j in running_on.get(n.name, []) if n.name in j.nodes]
            busy = bool(running)
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
                    partitions=list(self._s.partitions),
                    cpus=n.cpus,
                    cpus_free=max(0, n.cpus - sum(cpus_on_a_node(j) for j in running)),
                    mem_mb=n.mem_mb,
                    mem_free_mb=max(0, n.mem_mb - sum(mem_on_a_node(j) for j in running)),
                    tmp_disk_mb=n.tmp_disk_mb,
                    sockets=n.sockets,
                    cores_per_socket=n.cores_per_socket,
                    threads_per_core=n.threads_per_core,
                )
            )
        return out

    def list_accounts(self) -> list[str]:
        if self.accounts is None:
            return ["root"]
        return sorted({a for accts in self.accounts.values() for a in accts} | {"root"})

    def default_account(self, user: str) -> str:
        allowed = (self.accounts or {}).get(user)
        return allowed[0] if allowed else ""

    def list_qos(self) -> list[str]:
        return sorted(QOS_NAMES)

    def qos_grace_s(self, qos: str) -> int | None:
        return self._s.qos_grace.get(qos, 0) if qos in QOS_NAMES else None

    def set_dependency_params(self, value: str) -> None:
        """slurm.conf ``DependencyParameters=value`` and ``scontrol reconfigure``."""
        self._s.dependency_params = value

    def kills_invalid_dependencies(self) -> bool:
        return site_kills_invalid_dep(self._s)

    def history(
        self, job_ids: list[int] | None = None, since: datetime | None = None, runs: bool = False
    ) -> list[AcctRecord]:
        out = []
        wanted = None if job_ids is None else set(job_ids)
        for j in self._s.jobs.values():
            if wanted is not None and j.job_id not in wanted:
                continue
            if since is not None and (j.end_time or self._s.now()) < since:
                continue
            end = j.end_time
            elapsed = int(((end or self._s.now()) - j.start_time).total_seconds()) if j.start_time else 0
            latest = AcctRecord(
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
                exit_code=j.exit_code or "0:0",
            )
            for past in j.past_runs if runs else []:
                out.append(
                    replace(latest, state=past.state, submit_time=past.submit_time, start_time=past.start_time,
                            end_time=past.end_time, elapsed_s=int((past.end_time - past.start_time).total_seconds()),
                            nodes=list(past.nodes), gpus={k: list(v) for k, v in past.gpus.items()}, exit_code="0:0")
                )  # fmt: skip
            out.append(latest)
        return out

    # --- internals -------------------------------------------------------------------------------

    def _log(self, method: str, args: tuple[object, ...]) -> None:
        if not self._s.controller_up:
            raise SlurmError([method], 1, f"slurm_load_jobs error: {CONTROLLER_UNREACHABLE}")
        self._s.calls.append((self.user, method, args))

    def _answering(self, command: str, error: str) -> None:
        """What squeue/sinfo --json say while slurmctld is down (tests/fixtures/slurm/*_ctld_down.json)."""
        if not self._s.controller_up:
            raise SlurmUnavailable(command.split(), error)

    def _is_admin(self) -> bool:
        return self.user == "root" or self.user in self.operators

    def _may_touch(self, j: Job) -> bool:
        return self._is_admin() or j.user == self.user

    def _get(self, job_id: int, what: str) -> Job:
        j = self._s.jobs.get(int(job_id))
        if j is None:
            raise SlurmError([what, str(job_id)], 1, f"Invalid job id specified for job {job_id}")
        return j

    def _unfinished(self, op: str, job_id: int, cmd: list[str]) -> Job:
        """Log `op`, then the job `cmd` may change: it exists, is ours, and has not finished."""
        self._log(op, (job_id,))
        j = self._touchable(job_id, cmd)
        refuse_finished(j, cmd)
        return j

    def _touchable(self, job_id: int, cmd: list[str]) -> Job:
        j = self._s.jobs.get(int(job_id))
        if j is None:
            raise SlurmError(cmd, 1, f"Invalid job id specified for job {job_id}")
        if not self._may_touch(j):
            raise SlurmError(
                cmd, 1, f"Invalid user id for job {job_id}\nslurm_suspend error: Invalid user id"
            )
        return j

    def _retype(self, j: Job, gres: str, cmd: list[str]) -> str:
        """The job's new gres as Slurm shows it; the typed GPUs it had before go to ``j.kept_gres``."""
        old = split_gres(j.tres_per_node)
        new = split_gres(gres)
        # a count of 0 asks for nothing: Slurm takes Gres=gpu:0 after a typed gres (recorded there too)
        old_untyped = [t is None for n, t, c, _ in old if n == "gpu" and c > 0]
        new_untyped = [t is None for n, t, c, _ in new if n == "gpu" and c > 0]
        if old_untyped and new_untyped and any(old_untyped) != any(new_untyped):
            raise SlurmError(
                cmd,
                1,
                f"Invalid GRES specification (with and without type identification) for job {j.job_id}",
            )
        # Slurm 22.05 quirk (tests/fixtures/slurm/scontrol_retyped_gres.txt): it shows only the new
        # gres but still grants every typed GPU the job had, even one the update gives a count of 0
        granted = {(n, t) for n, t, c, _ in new if c > 0}
        kept = {(n, t) for n, t, _, _ in (*old, *split_gres(j.kept_gres)) if n == "gpu" and t}
        j.kept_gres = ",".join(f"gres:{n}:{t}:1" for n, t in sorted(kept - granted, key=lambda x: x[1] or ""))
        return ",".join(f"gres:{n}:{t}:{c}" if t else f"gres:{n}:{c}" for n, t, c, _ in new)

    def _maybe_schedule(self) -> None:
        if self._s.auto_schedule:
            self.schedule()

    def _end(self, job_id: int, state: str, exit_code: str, reason: str = "None") -> None:
        j = self._get(job_id, "end")
        if j.state != "RUNNING":
            raise SlurmError(["end", str(job_id)], 1, f"job {job_id} is {j.state}, not RUNNING")
        j.state, j.reason, j.exit_code, j.end_time = state, reason, exit_code, self._s.now()
        self._maybe_schedule()


def _yes_no(value: str | None) -> bool | None:
    """--kill-on-invalid-dep as sbatch reads it (slurm_opt.c: yes or no, in any case)."""
    if value is None:
        return None
    if value.lower() in ("yes", "no"):
        return value.lower() == "yes"
    raise SlurmError(["sbatch"], 1, "sbatch: error: Invalid --kill-on-invalid-dep specification")
