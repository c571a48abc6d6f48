"""The fake Slurm's cluster: its jobs, nodes and clock, shared by every user's view of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hivebatch.slurm.parse import requeue_delay_s
from hivebatch.slurm.types import FINISHED_STATES, Reservation, SlurmError

QOS_NAMES = ("urgent", "prior", "normal", "opportunistic")
PREEMPTABLE_QOS = "opportunistic"
#: seconds before a preempted (requeued) job may start again, from the lab's AuthInfo as slurmctld
#: derives it (tests/fixtures/slurm/scontrol_show_config.txt)
REQUEUE_DELAY_S = requeue_delay_s({"AuthInfo": "cred_expire=10"})
#: finished jobs stay visible in squeue this long (the lab's MinJobAge)
MIN_JOB_AGE_S = 300


@dataclass(frozen=True)
class PastRun:
    """A run that a requeue ended, as ``sacct --duplicates`` keeps it beside the job's latest."""

    state: str
    submit_time: datetime
    start_time: datetime
    end_time: datetime
    nodes: list[str]
    gpus: dict[str, list[int]]


@dataclass
class Job:
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
    deadline: datetime | None = None
    time_min_s: int | None = None
    script: str = ""
    env: dict[str, str] = field(default_factory=dict)
    admin_comment: str = ""
    site_factor: int = 0  # as the job_submit plugin reads it: Slurm's SiteFactor less its offset
    dependency: str = ""  # as given: afterok:ID[:ID...] or afterany:ID[:ID...]
    kill_invalid_dep: bool | None = None  # --kill-on-invalid-dep=yes/no, or not given
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_pending: list[int] = field(default_factory=list)  # tasks this record still stands for
    array_max: int = 0
    signals: list[tuple[str, str]] = field(default_factory=list)  # (signal, target) sent by scancel
    batch: bool = True  # False: an srun or salloc waits for it in a terminal
    told: list[str] = field(default_factory=list)  # what scontrol notify printed in that terminal
    past_runs: list[PastRun] = field(default_factory=list)
    kept_gres: str = ""  # typed GPUs a re-typing update did not take away (Slurm grants them still)
    # MinCPUsNode, MinMemoryNode and TasksPerNode as an update set them (the fake schedules by GPUs only)
    cpus_per_node: int = 0
    mem_per_node_mb: int = 0
    tasks_per_node: int = 0
    tmp_disk_mb: int = 0  # --tmp
    mem_per_cpu_mb: int = 0  # --mem-per-cpu
    tasks: int = 0  # -n (0: not given)
    cpus_total: int = 0  # -n times -c: all its tasks' CPUs (0: -n not given)
    # nodes where Slurm's scheduler finds the job never runnable, for a need the fake does not model
    # (FakeSlurm.never_runnable_on): pinned there, it is held by Slurm itself
    never_on: frozenset[str] = frozenset()
    held_by_slurm: bool = (
        False  # BadConstraints with priority 0 (tests/fixtures/slurm/bad_constraints_held.txt)
    )
    # Slurm preempts it for another job, letting it run out its QOS's GraceTime until grace_end
    # (FakeSlurm.preempt_with_grace; tests/fixtures/slurm/squeue_preempt_grace.json)
    preempt_time: datetime | None = None
    grace_end: datetime | None = None

    def start_grace(self, now: datetime, seconds: float) -> None:
        """Slurm preempts it (preempt/qos): it runs on until its QOS's GraceTime ends, squeue showing
        since when (tests/fixtures/slurm/preempt_grace.txt)."""
        self.preempt_time = now
        self.grace_end = now + timedelta(seconds=seconds)

    def requeue(self, now: datetime, reason: str) -> None:
        """Back to PENDING without its allocation, as Slurm requeues, and eligible again only after a
        delay (the lab: AuthInfo=cred_expire=10). The run so far stays in accounting, and the job counts
        as submitted anew: on the lab the next run's Submit is the requeue
        (tests/fixtures/slurm/sacct_requeued_runs.txt)."""
        if self.start_time is not None:
            ended = "REQUEUED" if self.state == "RUNNING" else self.state
            gpus = {k: list(v) for k, v in self.gpus.items()}
            run = PastRun(
                ended, self.submit_time, self.start_time, self.end_time or now, list(self.nodes), gpus
            )
            self.past_runs.append(run)
        self.submit_time = now
        self.state, self.reason = "PENDING", reason
        self.nodes, self.gpus, self.shards, self.start_time = [], {}, {}, None
        self.preempt_time = self.grace_end = None
        self.restarts += 1
        self.eligible_at = now + timedelta(seconds=REQUEUE_DELAY_S)

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and (
            self.reason in ("JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state") or self.held_by_slurm
        )


def cpus_on_a_node(job: Job) -> int:
    """The CPUs a running job holds on each of its nodes, as sinfo counts them: its tasks' CPUs shared
    out over its nodes, at least its MinCPUsNode."""
    return max(job.cpus_per_node, -(-job.cpus_total // max(len(job.nodes), 1)))


def mem_on_a_node(job: Job) -> int:
    """The memory a running job holds on each of its nodes: per node, or per CPU of its CPUs there."""
    return max(job.mem_per_node_mb, job.mem_per_cpu_mb * cpus_on_a_node(job))


@dataclass
class Node:
    name: str
    gpus: int
    shards_per_gpu: int
    state: str = "IDLE"  # IDLE | DOWN | DRAIN
    reason: str = ""
    registered: bool = True  # False from a slurmctld restart until its slurmd registers again
    # the lab's node size (tests/fixtures/slurm/sinfo_mem_held.json); the fake schedules by GPUs only,
    # but lists what its running jobs hold of these, as sinfo does
    cpus: int = 16
    mem_mb: int = 64000
    tmp_disk_mb: int = 0  # the lab's slurm.conf sets no TmpDisk
    sockets: int = 2  # Sockets=2 CoresPerSocket=8 ThreadsPerCore=1
    cores_per_socket: int = 8
    threads_per_core: int = 1


class State:
    def __init__(self, nodes: list[Node], clock: Callable[[], datetime] | None, auto_schedule: bool) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.jobs: dict[int, Job] = {}
        self.next_id = 1
        self._offset = timedelta()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.auto_schedule = auto_schedule
        self.calls: list[tuple[str, str, tuple[object, ...]]] = []
        self.controller_up = True  # False: slurmctld stopped (slurmdbd, hence history, still answers)
        #: QOS -> GraceTime in seconds (none: 0, requeued at once): FakeSlurm.set_qos_grace
        self.qos_grace: dict[str, int] = {}
        #: slurmctld's job_submit plugin (hivebatch's, run by Lua); None = no plugin configured
        self.job_submit: Any = None
        #: advance reservations (naive UTC, as parsed); no job here asks for one, so none may run into them
        self.reservations: list[Reservation] = []
        #: the lab's one partition over every node, and its state (UP, DOWN, DRAIN, INACTIVE)
        self.partitions: dict[str, str] = {"gpu": "UP"}
        #: QOS -> MaxTRESPerUser=gres/gpu=N (sacctmgr modify qos … set MaxTRESPerUser=gres/gpu=N)
        self.qos_max_gpus_per_user: dict[str, int] = {}
        #: the plugin's notes file (controller.refusals_file), where it passes owners' updates on
        self.notes_path: Path | None = None
        #: slurm.conf DependencyParameters (FakeSlurm.set_dependency_params); "" = unset
        self.dependency_params = ""

    def now(self) -> datetime:
        return (self._clock() + self._offset).replace(microsecond=0)


def refuse_finished(j: Job, cmd: list[str]) -> None:
    """scontrol hold/release of a finished job, as 22.05 words it."""
    if j.state in FINISHED_STATES:
        raise SlurmError(
            cmd,
            1,
            f"Job has already finished for job {j.job_id}\nslurm_suspend error: Job has already finished",
        )
