"""What the Slurm backends return: plain records, the same for the CLI, pyslurm and fake backends."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from hivebatch.errors import HivebatchError

#: Job states after which a job will not run again (a requeued job goes back to PENDING).
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
    }
)
#: Pending reasons of a held job, as the lab reports them.
#: scancel's options for who receives a signal (recorded in tests/fixtures/slurm/scancel_signal_targets.txt)
SIGNAL_TARGETS: dict[str, tuple[str, ...]] = {"batch": ("--batch",), "steps": (), "all": ("--full",)}
# a job requeued held (scontrol requeuehold): squeue --json says JobHeldUser with this description
REQUEUED_HELD = "job_requeued_in_held_state"
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", REQUEUED_HELD})
#: Node state words (base state or flag) that make a node unusable for new work. Besides the broken
#: states: a maintenance or other reservation (its nodes serve only the reservation's users, outside
#: the cells), a reboot asked for or under way, and power saving in any phase — each recorded on the
#: lab in tests/fixtures/slurm/sinfo_no_new_work_*.json.
BAD_NODE_WORDS = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "INVALID",
        "INVAL",
        "UNKNOWN",
        "FUTURE",
        "MAINT",
        "MAINTENANCE",
        "RESERVED",
        "RESV",
        "REBOOT",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "POWER_UP",
    }
)


class SlurmError(HivebatchError):
    """A Slurm command failed; carries the command, its exit status and what it printed on stderr."""

    def __init__(self, command: list[str], returncode: int, stderr: str) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr
        detail = "; ".join(line.strip() for line in stderr.splitlines() if line.strip()) or "no error message"
        super().__init__(f"{' '.join(command[:3])} failed (exit {returncode}): {detail}")

    @property
    def permission_denied(self) -> bool:
        text = self.stderr.lower()
        return "permission denied" in text or "invalid user id" in text

    @property
    def unknown_job(self) -> bool:
        return "invalid job id" in self.stderr.lower()


class SlurmUnavailable(SlurmError):
    """Slurm could not give a trustworthy answer: slurmctld unreachable, an ``errors`` array in its JSON,
    a command that failed, no node heard from. Nothing Slurm said this cycle may change the ledger."""

    def __init__(self, command: list[str], detail: str, returncode: int = 0) -> None:
        super().__init__(command, returncode, detail)
        self.detail = detail
        HivebatchError.__init__(
            self, f"Slurm is unavailable ({' '.join(command[:2])}: {detail}); nothing changed"
        )


#: what ``scontrol``, ``squeue`` … print on stderr while slurmctld is down (recorded on the lab)
CONTROLLER_UNREACHABLE = "Unable to contact slurm controller (connect failure)"
#: node state words of a node slurmctld has not heard from (just restarted, or the node is gone)
UNRESPONSIVE_NODE_WORDS = frozenset({"UNKNOWN", "NOT_RESPONDING"})


@dataclass
class SlurmJob:
    job_id: int
    name: str
    user: str
    account: str
    qos: str
    state: str
    reason: str
    nodes: list[str] = field(default_factory=list)
    gpus: dict[str, list[int]] = field(default_factory=dict)
    shards: dict[str, dict[int, int]] = field(default_factory=dict)
    comment: str = ""
    # written only by the job_submit plugin (or SlurmUser/root): the trusted hivebatch request
    admin_comment: str = ""
    # a pending job's begin time (sbatch --begin); hivebatch's job_submit plugin sets a far one when an
    # owner releases a GPU job that is still waiting for its placement
    eligible_time: datetime | None = None
    # how often Slurm requeued it: a requeued job waits for its old credential to expire (AuthInfo's
    # cred_expire) and squeue says BeginTime meanwhile, as for a --begin
    restarts: int = 0
    submit_time: datetime | None = None
    start_time: datetime | None = None
    # a pending job's start as slurmctld expects it (squeue --start): its backfill pass's estimate
    expected_start: datetime | None = None
    end_time: datetime | None = None
    time_limit_s: int | None = None
    # --time-min: Slurm judges a --deadline by it when given, else by the time limit
    time_min_s: int | None = None
    deadline: datetime | None = None  # --deadline: Slurm ends a job that can no longer finish by it
    num_nodes: int = 1
    held: bool = False
    exit_code: str | None = None
    #: what the job asks Slurm for per node (e.g. "gres:gpu:g3:1,gres:gpu:g5:1"): owners may change it
    tres_per_node: str = ""
    required_nodes: list[str] = field(default_factory=list)
    partition: str = ""
    # squeue's dependency text, e.g. "afterok:983(unfulfilled)"; "" when the job has none left
    dependency: str = ""
    priority: int = 0
    # an array's task: its array's job id and its index. A record still holding several pending tasks
    # (squeue's ``123_[4-9%2]``) has ``array_task_id`` None and the pending indices in ``array_pending``
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_pending: str = ""
    array_max_tasks: int = 0  # the ``%`` throttle: at most this many tasks run at once (0: no limit)
    # what the job needs of a node besides GPUs: Slurm is the judge, hivebatch only avoids pinning a
    # job where Slurm could not start it
    features: str = ""
    cpus_per_node: int = 0
    cpus_total: int = 0  # all its tasks' CPUs (-n 32: 32), which must fit on the nodes it is pinned to
    tasks: int = 0  # -n
    tasks_per_node: int = 0  # --ntasks-per-node (0: not given), with -n a most per node
    # the most nodes its owner allows (-N 2, -N 1-3; 0: no count given, Slurm spreads the tasks
    # over as many nodes as they need)
    max_nodes: int = 0
    mem_per_node_mb: int = 0
    mem_per_cpu_mb: int = 0  # --mem-per-cpu (or DefMemPerCPU): its tasks' memory follows their CPUs
    tmp_disk_mb: int = 0  # --tmp: MB of temporary disk on each node
    # -B / --sockets-per-node, --cores-per-socket, --threads-per-core (0: not asked)
    sockets_per_node: int = 0
    cores_per_socket: int = 0
    threads_per_core: int = 0
    tasks_per_socket: int = 0  # --ntasks-per-socket (0: not asked)
    # no memory asked at all (--mem=0, or a site without DefMemPerCPU/Node): Slurm gives the job all of
    # each node's memory, so it starts only where no other job holds any
    whole_node_memory: bool = False
    reservation: str = ""
    excluded_nodes: list[str] = field(default_factory=list)
    # False for an srun or salloc job: its client waits in a terminal (squeue's batch_flag)
    batch: bool = True
    # --nice or `scontrol update Nice=`: Slurm lowers the job's priority by it; owners may only raise it
    nice: int = 0
    # --spread-job: Slurm spreads the job over as many nodes as it may (one task on each, up to -N)
    spread_job: bool = False
    # --kill-on-invalid-dep: yes (True), no (False) or left to the site's DependencyParameters (None);
    # squeue's flags KILL_INV_DEP and NO_KILL_INV_DEP (tests/fixtures/slurm/kill_invalid_dep.txt)
    kill_invalid_dep: bool | None = None
    # the cluster's DependencyParameters=kill_invalid_depend, which decides when the job asked neither way
    # (kill_invalid_depend_site.txt); set by the controller's look at Slurm, not by squeue
    site_kills_invalid_dep: bool = False
    # what it asks of the cluster's licenses (-L, squeue's "matlab:1,ansys:2"): Slurm starts it only when they
    # are free (tests/fixtures/slurm/licenses.txt)
    licenses: str = ""
    # squeue's shared "shared": it shares its CPUs with other such jobs of its partition, if the partition's
    # OverSubscribe lets it (--oversubscribe, or OverSubscribe=FORCE): partition_oversubscribe.txt
    shares_cpus: bool = False
    # an admin's scontrol suspend: when it was last suspended or resumed, and how long it ran before its
    # last suspension (tests/fixtures/slurm/squeue_resumed_twice.json); Slurm moves its end by the time
    # it was suspended
    suspend_time: datetime | None = None
    pre_suspend_s: int = 0
    # Slurm preempts it (preempt/qos) for another job: since when, and, while it runs out its QOS's
    # GraceTime, when that ends (Slurm moved its end there): tests/fixtures/slurm/squeue_preempt_grace.json
    preempt_time: datetime | None = None
    grace_end: datetime | None = None

    @property
    def array_pending_meta(self) -> bool:
        """A record standing for pending array tasks not yet split off: never placed as one job.

        An array of one task (``--array=3``) keeps that form until it starts (squeue's ``520_[3]``), and
        Slurm splits nothing off it: it is placed as the one job it is, named by its own id, which
        ``scontrol release`` takes where ``520_3`` changes nothing (tests/fixtures/slurm/array_single_task.txt)."""
        return bool(self.array_pending) and not self.array_pending.partition("%")[0].isdigit()

    @property
    def cancelled_on_invalid_dep(self) -> bool:
        """Whether Slurm cancels the job once its dependency can never be met: its own yes or no, else
        the cluster's setting (handle_invalid_dependency in slurmctld's job_mgr.c)."""
        if self.kill_invalid_dep is not None:
            return self.kill_invalid_dep
        return self.site_kills_invalid_dep

    @property
    def overcommitted(self) -> bool:
        """--overcommit (-O): Slurm allocates as if one task ran on each node, with a task's CPUs there,
        and ran `-n 64 -O` on one node (tests/fixtures/slurm/overcommit.txt). squeue names no such
        flag, but its ``cpus`` is then the node count, fewer than the tasks, which each hold a CPU at
        least otherwise."""
        return self.tasks > 1 and 0 < self.cpus_total < self.tasks

    @property
    def partitions(self) -> list[str]:
        """The partitions it asked for (``-p a,b``; none when Slurm lists none)."""
        return [p for p in self.partition.split(",") if p]

    @property
    def display_id(self) -> str:
        if self.array_job_id and self.array_pending:
            return f"{self.array_job_id}_[{self.array_pending}]"
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)

    def suspended_s(self, now: datetime) -> float:
        """How long the job has been suspended in all, up to ``now`` (aware)."""
        if self.suspend_time is None or self.start_time is None:
            return 0.0
        last = now if self.state == "SUSPENDED" else self.suspend_time
        return max(0.0, (last - self.start_time).total_seconds() - self.pre_suspend_s)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    def mem_on_node_mb(self, cpus: int) -> int:
        """The memory (MB) it takes of a node where it has ``cpus`` CPUs (--mem, or --mem-per-cpu)."""
        return max(self.mem_per_node_mb, self.mem_per_cpu_mb * cpus)


@dataclass
class SlurmNode:
    name: str
    state: str
    bad: bool
    gpu_indices: list[int] = field(default_factory=list)
    gpus_used: list[int] = field(default_factory=list)
    #: GPU indices on which some job holds shards (GPU sharing)
    gpus_shared: list[int] = field(default_factory=list)
    reason: str = ""
    partitions: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)  # active features
    cpus: int = 0
    cpus_free: int = 0
    mem_mb: int = 0
    mem_free_mb: int = 0  # real memory less what Slurm allocated to jobs
    #: TmpDisk in MB (0 where slurm.conf sets none: Slurm then refuses any --tmp); None if not reported
    tmp_disk_mb: int | None = None
    # its layout (0: not reported): Slurm starts a job there only if it asks no more sockets, cores per
    # socket or threads per core (-B, --sockets-per-node ...: tests/fixtures/slurm/held_job_sizes.txt)
    sockets: int = 0
    cores_per_socket: int = 0
    threads_per_core: int = 0
    #: reservations on the node, active or to come (naive UTC start, end, name): Slurm starts a job that
    #: does not ask for one there only if its time limit ends before the next one starts
    #: (tests/fixtures/slurm/reservation_time_limit.txt)
    reserved: list[tuple[datetime, datetime, str]] = field(default_factory=list)
    #: the node's partitions in which Slurm starts no job now (name -> DOWN or INACTIVE): it keeps their
    #: jobs pending (PartitionDown) until an admin sets the partition UP
    stopped: dict[str, str] = field(default_factory=dict)
    #: the node's partitions with a MaxTime (name -> seconds): Slurm never starts a job whose time limit is
    #: longer there (PartitionTimeLimit)
    max_time_s: dict[str, int] = field(default_factory=dict)
    #: the node's partitions with a MaxCPUsPerNode (name -> CPUs), and the CPUs the jobs running there in
    #: each hold: Slurm gives the jobs of such a partition at most that many of the node's CPUs in all
    #: (tests/fixtures/slurm/partition_max_cpus.txt)
    max_cpus: dict[str, int] = field(default_factory=dict)
    cpus_in_partition: dict[str, int] = field(default_factory=dict)
    #: the node's partitions with a MaxMemPerNode (name -> MB): the most memory each job gets there
    max_mem_mb: dict[str, int] = field(default_factory=dict)
    #: the node's partitions that keep out some accounts or QOS (name -> who may run there)
    access: dict[str, PartitionAccess] = field(default_factory=dict)
    #: the node's partitions with a MinNodes above 1 or a MaxNodes (name -> (MinNodes, MaxNodes; 0: no
    #: most)): Slurm runs their jobs on that many nodes, or leaves them pending, PartitionNodeLimit
    #: (tests/fixtures/slurm/partition_node_limits.txt)
    node_limits: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: the node's partitions whose OverSubscribe lets jobs share CPUs (name -> how many jobs may share one
    #: CPU), the CPUs each running job sharing them holds here, and the CPUs all its running jobs hold
    #: (tests/fixtures/slurm/partition_oversubscribe.txt)
    cpu_rows: dict[str, int] = field(default_factory=dict)
    shared_cpus: dict[str, list[int]] = field(default_factory=dict)
    cpus_held: int = 0
    #: the user whose jobs alone Slurm starts there now (a job of an ExclusiveUser partition runs there: sinfo's
    #: "owner"), the node's ExclusiveUser partitions, and the users of the jobs running there: Slurm starts a job
    #: of such a partition only where no other user's job runs (tests/fixtures/slurm/partition_exclusive_user.txt)
    owner: str = ""
    user_exclusive: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    #: of those, the users with a job running there that is not an opportunistic GPU job of hivebatch's: the
    #: others' jobs a guaranteed job may tell to leave, which Slurm does not requeue for it
    #: (tests/fixtures/slurm/exclusive_user_opportunistic.txt)
    firm_users: set[str] = field(default_factory=set)
    #: the CPUs and MB of memory held there by running jobs of the preemptable QOS: Slurm requeues those for a
    #: released job of a QOS that preempts it (preempt/qos: tests/fixtures/slurm/preempt_qos_node_resources.txt)
    preemptible_cpus: int = 0
    preemptible_mem_mb: int = 0

    @property
    def yielding_users(self) -> frozenset[str]:
        """The users whose jobs running there are all opportunistic GPU jobs."""
        return frozenset(self.users - self.firm_users)

    @property
    def responding(self) -> bool:
        """False while slurmctld has not heard from the node (UNKNOWN after a restart, or ``*``)."""
        words = self.state.upper().replace("*", "+NOT_RESPONDING").split("+")
        return not any(w in UNRESPONSIVE_NODE_WORDS for w in words)


@dataclass(frozen=True)
class Reservation:
    """One advance reservation, as ``scontrol show reservation`` lists it (times naive UTC; a recurring one
    shows its next occurrence)."""

    name: str
    start: datetime
    end: datetime
    nodes: tuple[str, ...]


#: partition states in which slurmctld starts no job (a DRAIN partition takes no new job but starts those
#: it has queued)
STOPPED_PARTITION_STATES = frozenset({"DOWN", "INACTIVE"})


@dataclass(frozen=True)
class PartitionAccess:
    """Who may run in a partition: its AllowAccounts and AllowQos (None: ALL), DenyAccounts and DenyQos.
    Slurm accepts a job they keep out and leaves it pending for ever (partition_access.txt)."""

    allow_accounts: frozenset[str] | None = None
    deny_accounts: frozenset[str] = frozenset()
    allow_qos: frozenset[str] | None = None
    deny_qos: frozenset[str] = frozenset()

    def keeps_out(self, account: str, qos: str) -> str | None:
        """Why a job of ``account`` and ``qos`` may not run here, in Slurm's words; None when it may."""
        for what, value, allow, deny in (
            ("account", account, self.allow_accounts, self.deny_accounts),
            ("QOS", qos, self.allow_qos, self.deny_qos),
        ):
            if allow is not None and value not in allow:
                return f"allows {what} {','.join(sorted(allow))} not {value}"
            if value in deny:
                return f"denies {what} {value}"
        return None


@dataclass(frozen=True)
class Partition:
    """One partition as ``scontrol show partition`` lists it."""

    name: str
    state: str
    nodes: tuple[str, ...]
    max_time_s: int | None = None  # MaxTime (None: UNLIMITED)
    max_cpus_per_node: int | None = None  # MaxCPUsPerNode (None: UNLIMITED)
    max_mem_per_node_mb: int | None = None  # MaxMemPerNode (None: UNLIMITED, or a MaxMemPerCPU)
    min_nodes: int = 1  # MinNodes (0 reads as 1: a job runs on one node at least)
    max_nodes: int = 0  # MaxNodes (0: UNLIMITED)
    cpu_rows: int = 1  # OverSubscribe=YES:N or FORCE:N: N jobs may share a CPU (1: NO or EXCLUSIVE)
    exclusive_user: bool = False  # ExclusiveUser=YES: a node running one of its jobs is that user's alone
    access: PartitionAccess = PartitionAccess()


@dataclass(frozen=True)
class GpuLimit:
    """A GPU total one Slurm association caps (GrpTRES gres/gpu=N): the account's own when ``user``
    is "", else one user's in the account."""

    account: str
    user: str
    gpus: int


@dataclass
class AcctRecord:
    job_id: int
    user: str
    account: str
    qos: str
    state: str
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    elapsed_s: int
    nodes: list[str]
    gpus: dict[str, list[int]]
    exit_code: str | None
    name: str = ""
    admin_comment: str = ""


def shown_id(job_id: int, slurm: Mapping[int, SlurmJob] | None) -> str:
    """Job ``job_id`` as squeue and hq show it (an array's task as 1948_3, not by its own id), where
    ``slurm`` (the jobs Slurm lists, by id) has it."""
    sj = slurm.get(job_id) if slurm is not None else None
    return sj.display_id if sj is not None else str(job_id)
