"""What the Slurm backends return: plain records, the same for the CLI, pyslurm and fake backends."""

from __future__ import annotations

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
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})
#: Node state words (base state or flag) that make a node unusable for new work.
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
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit_s: int | None = None
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

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


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

    @property
    def responding(self) -> bool:
        """False while slurmctld has not heard from the node (UNKNOWN after a restart, or ``*``)."""
        words = self.state.upper().replace("*", "+NOT_RESPONDING").split("+")
        return not any(w in UNRESPONSIVE_NODE_WORDS for w in words)


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
    comment: str
    exit_code: str | None
    name: str = ""
    admin_comment: str = ""
