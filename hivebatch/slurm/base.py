"""The one interface through which hivebatch talks to Slurm."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from hivebatch.slurm.types import AcctRecord, GpuLimit, Partition, Reservation, SlurmJob, SlurmNode


class SlurmBackend(ABC):
    """Every method raises SlurmError when Slurm refuses; job ids are Slurm's integers."""

    name: str = "abstract"

    @abstractmethod
    def submit(self, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None) -> int:
        """Submit a batch script (text, not a path); ``sbatch_args`` e.g. ["--hold", "-A", "cv"]."""

    def check_submission(self, script_text: str, sbatch_args: list[str]) -> None:
        """Slurm's verdict on a submission, without submitting (``sbatch --test-only``: slurmctld's own
        checks and the site's job_submit plugin); SlurmError with Slurm's words if it would refuse it."""
        raise NotImplementedError(f"the {self.name} backend cannot ask Slurm without submitting")

    def submit_told(
        self, script_text: str, sbatch_args: list[str], env: dict[str, str] | None = None
    ) -> tuple[int, list[str]]:
        """``submit``, with the lines sbatch showed its user on acceptance (the job_submit plugin's notes,
        sbatch's warnings), for a front end that stands in for sbatch; none where the backend has none."""
        return self.submit(script_text, sbatch_args, env), []

    @abstractmethod
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
        """Pin a pending job: exact nodes, exactly ``num_nodes`` nodes, typed GRES like gpu:g3:1,gpu:g5:1,
        the CPUs and memory it needs on each node (its share of a per-GPU ask), and its most tasks on a
        node (whole tasks' GPUs on each)."""

    @abstractmethod
    def release(self, job_id: int) -> None: ...

    @abstractmethod
    def split_array_task(self, array_job_id: int, task_id: int) -> None:
        """Give one pending task of an array a job record of its own, so it can be placed alone.

        Any update of one task does this in slurmctld; hivebatch holds the task as ``hold`` does,
        which an Operator may do and which leaves it held by an admin, as placement wants it. The task
        keeps the array's request; its new job id shows in the next listing."""

    @abstractmethod
    def clear_begin_time(self, job_id: int, to: datetime | None = None) -> None:
        """Let a pending job start as soon as it is released (drops a --begin or the plugin's far one), or
        from ``to`` on."""

    @abstractmethod
    def clear_dependency(self, job_id: int) -> None:
        """Drop a pending job's dependency, as Slurm drops one it found met."""

    @abstractmethod
    def mark_owner_hold(self, job_id: int) -> None:
        """Give a held job the begin time the job_submit plugin gives a hold its owner set (2100-01-02), so
        the owner's ``scontrol release`` leaves it pending for hivebatch instead of letting Slurm start it."""

    @abstractmethod
    def guard_owner_hold(self, job_id: int) -> None:
        """Give an array record its owner holds the site factor (-3) by which the job_submit plugin refuses
        their start time over the hold's mark; the plugin cannot write it on their update of an array."""

    @abstractmethod
    def user_hold(self, job_id: int) -> None:
        """Make a held job's hold one its owner may release (``scontrol uhold``); the job_submit plugin
        marks it as an Operator's hold, which their own hold cannot undo."""

    @abstractmethod
    def hold(self, job_id: int) -> None:
        """Hold a pending job as the controller (shown by Slurm as an admin's hold), in a way the job_submit
        plugin tells from an admin's own ``scontrol hold``, which the controller leaves alone."""

    @abstractmethod
    def requeue_hold(self, job_id: int) -> None:
        """Stop a running job and put it back in the queue, held, keeping its GRES and node list."""

    @abstractmethod
    def cancel(self, job_id: int) -> None: ...

    @abstractmethod
    def signal(self, job_id: int, signal: str, target: str) -> None:
        """Send a running job ``signal`` (a name without SIG, e.g. USR1) without ending it. ``target``:
        "batch" the batch shell alone, "steps" its job steps alone, "all" the batch shell, its
        children and the steps (recorded in tests/fixtures/slurm/scancel_signal_targets.txt)."""

    @abstractmethod
    def notify(self, job_id: int, message: str) -> None:
        """Print ``message`` on the stderr of the srun or salloc waiting for pending job ``job_id``
        (``scontrol notify``). SlurmError for a batch job, which has no one to tell before it runs, and
        for a job Slurm no longer knows (tests/fixtures/slurm/notify_pending_interactive.txt)."""

    def may_notify_others(self) -> bool:
        """Whether ``notify`` may reach other users' jobs: Slurm lets root and SlurmUser do it, and
        refuses an Operator, logging a "Security violation" in slurmctld.log."""
        return False

    @abstractmethod
    def list_jobs(self, job_ids: list[int] | None = None) -> list[SlurmJob]:
        """Jobs Slurm still knows (pending, running, and finished ones for MinJobAge seconds)."""

    @abstractmethod
    def list_nodes(self) -> list[SlurmNode]: ...

    def list_reservations(self) -> list[Reservation]:
        """Every advance reservation, active or to come (none where the backend cannot tell)."""
        return []

    def list_partitions(self) -> list[Partition]:
        """Every partition with its state (none where the backend cannot tell)."""
        return []

    def list_licenses(self) -> dict[str, int]:
        """Each license the cluster counts, and how many are free (none where the backend cannot tell)."""
        return {}

    def kills_invalid_dependencies(self) -> bool:
        """Whether Slurm cancels a job whose dependency can never be met when the job asked neither way
        with --kill-on-invalid-dep (slurm.conf ``DependencyParameters=kill_invalid_depend``); False
        where the backend cannot tell."""
        return False

    def job_gpus(self, job_id: int) -> dict[str, list[int]]:
        """The GPU indices per node Slurm allocated a running job, read afresh (IDX of its gres detail).

        Not from ``scontrol -d show job``: it prints the name as typed, and a line break in it adds a
        detail line of the owner's choosing (tests/fixtures/slurm/scontrol_feigned_detail_name.txt)."""
        return next((j.gpus for j in self.list_jobs([job_id])), {})

    @abstractmethod
    def ping(self) -> None:
        """Return when slurmctld answers; raise SlurmUnavailable when it does not."""

    @abstractmethod
    def history(
        self, job_ids: list[int] | None = None, since: datetime | None = None, runs: bool = False
    ) -> list[AcctRecord]:
        """Accounting records (sacct) of jobs, finished or not: each job's latest run, or with ``runs``
        every run of a requeued job, oldest first (sacct --duplicates). A requeue resubmits the job:
        the later run's submit time is the requeue, not the user's submission."""

    @abstractmethod
    def list_accounts(self) -> list[str]:
        """Slurm accounts known to accounting (each VC needs one)."""

    @abstractmethod
    def default_account(self, user: str) -> str:
        """The account Slurm gives ``user``'s jobs when they name none ("" when it has none)."""

    @abstractmethod
    def list_qos(self) -> list[str]:
        """QOS names known to accounting (each job class needs one)."""

    def qos_grace_s(self, qos: str) -> int | None:
        """Seconds of GraceTime the QOS gives a job Slurm preempts (None: this backend cannot tell, or
        there is no such QOS)."""
        return None

    def gpu_group_limits(self) -> list[GpuLimit] | None:
        """The GPU totals Slurm's associations cap (GrpTRES gres/gpu), per account and user ("" for
        the account's own association); None when this backend cannot tell."""
        return None
