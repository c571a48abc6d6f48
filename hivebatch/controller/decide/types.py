"""What decide returns (places, victims, waits) and the working state its steps share."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field

from hivebatch.cells import CellAllocator, GpuUse
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide.dependency import Listing
from hivebatch.controller.decide.fit import Needs, needs_of, node_rooms, unfit_nodes
from hivebatch.controller.decide.partition_caps import in_partitions, job_cpus, job_mem
from hivebatch.controller.decide.spread import NodeSize
from hivebatch.controller.decide.tasks import TaskBuilder
from hivebatch.controller.decide.times import aware
from hivebatch.controller.ledger import Ledger
from hivebatch.controller.observe import phase
from hivebatch.db.models import Job
from hivebatch.node_room import NodeNeeds, NodeRoom
from hivebatch.qos import Task
from hivebatch.request import JobRequest, kept_gpus, plugin_extras
from hivebatch.slurm.parse import expand_hostlist, take_licenses
from hivebatch.slurm.types import PartitionAccess, SlurmJob

GpuMap = dict[str, dict[int, GpuUse]]


def _nodelist(sj: SlurmJob) -> str:
    """The owner's -w/--nodelist ("" when none): Slurm's own while the job waits unpinned, where the
    owner may change it (tests/fixtures/slurm/owner_exclude_nodes.txt); once a pin has replaced it,
    the one the plugin kept in the request."""
    recorded = str(plugin_extras(sj).get("nodelist") or "")
    if kept_gpus(sj) or set(expand_hostlist(recorded)) == set(sj.required_nodes):
        return recorded  # as the owner wrote it: node[3-4]
    return ",".join(sj.required_nodes)


@dataclass
class Place:
    job: Job
    placement: dict[str, list[int]]
    gres: str | None
    shape: tuple[int, int] | None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    ect: dt.datetime | None = None
    preempts: list[int] = field(default_factory=list)
    resumed: bool = False
    note: str | None = None  # said to the job's owner as its reason while it is placed


@dataclass
class Wait:
    job: Job
    reason: str
    rejected: bool = False
    shape: tuple[int, int] | None = None
    predicted_start: dt.datetime | None = None
    predicted_end: dt.datetime | None = None
    slack_s: float | None = None
    ect: dt.datetime | None = None
    latency_s: float | None = None
    reserved_start: dt.datetime | None = None  # the start its VC's backfill reservation promises
    # no node it may use has room now besides GPUs, and none can before this: the first time limit of a
    # job running on them (its start is predicted no earlier)
    not_before: dt.datetime | None = None
    # Slurm would not start it now whatever the GPUs (a dependency, a begin time, its owner's hold):
    # no start is predicted for it, and it takes no GPUs in the estimate of the jobs behind it
    not_startable: bool = False


@dataclass
class TakeBack:
    """A placed job Slurm has not started, held again with its cells given back."""

    job: Job
    why: str
    avoid: bool = True  # keep it off the nodes it waited on for a while (avoid.AVOID_FOR_S)
    then: str = ""  # what comes next, when not just being placed again


@dataclass
class Decisions:
    places: list[Place] = field(default_factory=list)
    victims: dict[int, int] = field(default_factory=dict)  # preempted slurm id -> slurm id taking its GPUs
    # running victims told to leave: slurm id -> (the job waiting for its GPUs, end of its notice)
    notices: dict[int, tuple[int, dt.datetime]] = field(default_factory=dict)
    waits: list[Wait] = field(default_factory=list)
    # array tasks to give a record of their own: (array job id, task index)
    splits: list[tuple[int, int]] = field(default_factory=list)
    # placed jobs Slurm has not started in time: held again, their cells given back (job, why)
    take_backs: list[TakeBack] = field(default_factory=list)
    # waiting jobs past their --deadline: released for Slurm to end them as DEADLINE (job, why)
    past_deadline: list[tuple[Job, str]] = field(default_factory=list)
    # waiting jobs whose dependency can never be met, that asked Slurm to cancel them then (job, why)
    doomed: list[tuple[Job, str]] = field(default_factory=list)
    #: the class each waiting job was decided in (its Slurm QOS, or lower when its owner is over a limit)
    classes: dict[int, str] = field(default_factory=dict)


@dataclass
class Round:
    """One decide call: its inputs, the queue sorted by kind, and the decisions so far."""

    ctx: ControllerContext
    ledger: Ledger
    now: dt.datetime
    alloc: CellAllocator
    builder: TaskBuilder
    gmap: GpuMap  # the allocator's GPU map, kept current by the requeued jobs resumed this round
    out: Decisions = field(default_factory=Decisions)
    placed_now: dict[int, Place] = field(default_factory=dict)
    by_sid: dict[str, Job] = field(default_factory=dict)
    requeued: list[tuple[Job, JobRequest]] = field(
        default_factory=list
    )  # placed before: they keep their gres
    slices: list[tuple[Job, JobRequest, SlurmJob]] = field(default_factory=list)
    fresh: list[tuple[Job, JobRequest, SlurmJob]] = field(
        default_factory=list
    )  # never placed: the policy round's
    tasks: list[Task] = field(default_factory=list)  # for the policy round
    reqs: dict[str, tuple[Job, JobRequest]] = field(default_factory=dict)  # task id -> its job
    unfit: dict[int, dict[str, str]] = field(default_factory=dict)  # Slurm id -> nodes it cannot use, why
    # the same, per distinct needs: thousands of waiting jobs share a few, and each costs a pass over the nodes
    unfit_by_needs: dict[tuple[Needs, frozenset[str], str, int | None], dict[str, str]] = field(
        default_factory=dict
    )
    # the nodes jobs of these needs (and --nodelist) can never use: a rejected job is judged every cycle
    never_by_needs: dict[tuple[Needs, str], dict[str, str]] = field(default_factory=dict)
    # slurm id -> how it runs otherwise than asked (a lower class, more nodes)
    run_notes: dict[int, str] = field(default_factory=dict)
    # a task's needs besides GPUs -> the nodes the pins not started yet leave too little for, and why
    short_by_needs: dict[NodeNeeds, dict[str, str]] = field(default_factory=dict)
    # GPU type (None: any) -> the most CPUs and memory one of its nodes has, asked for each waiting job
    size_by_type: dict[tuple[str | None, str], NodeSize] = field(default_factory=dict)
    found: CellAllocator | None = None  # the cells before the cycle's first resume attempt (None: no attempt)
    type_nodes: dict[str | None, frozenset[str]] = field(default_factory=dict)  # see nodes_of_type
    # the jobs holding licenses (Slurm id, end, what it holds): licenses.held_licenses, once a round
    license_holders: list[tuple[int, float, dict[str, int]]] | None = None

    @functools.cached_property
    def stopped_partitions(self) -> dict[str, str]:
        """The partitions in which Slurm starts no job now (name -> DOWN or INACTIVE)."""
        return {p: state for n in self.ledger.nodes.values() for p, state in n.stopped.items()}

    @functools.cached_property
    def partition_max_time(self) -> dict[str, int]:
        """The partitions with a MaxTime (name -> seconds)."""
        return {p: s for n in self.ledger.nodes.values() for p, s in n.max_time_s.items()}

    @functools.cached_property
    def partition_access(self) -> dict[str, PartitionAccess]:
        """The partitions that keep out some accounts or QOS (name -> who may run there)."""
        return {p: a for n in self.ledger.nodes.values() for p, a in n.access.items()}

    @functools.cached_property
    def partition_node_limits(self) -> dict[str, tuple[int, int]]:
        """The partitions with a MinNodes above 1 or a MaxNodes (name -> (MinNodes, MaxNodes; 0: none))."""
        return {p: lim for n in self.ledger.nodes.values() for p, lim in n.node_limits.items()}

    @functools.cached_property
    def license_pins(self) -> frozenset[int]:
        """The pins Slurm has not started yet that ask for licenses (Slurm ids): it counts a job's licenses
        once it runs, so they are theirs meanwhile."""
        taken_back = {tb.job.slurm_job_id for tb in self.out.take_backs}
        return frozenset(
            job.slurm_job_id
            for job in self.ledger.jobs.values()
            if job.state == "placed"
            and job.slurm_job_id not in taken_back
            and (sj := self.ledger.slurm.get(job.slurm_job_id)) is not None
            and sj.licenses
            and phase(sj.state) == "pending"
        )

    @functools.cached_property
    def licenses_left(self) -> dict[str, int] | None:
        """Each license's free count, less what ``license_pins`` ask (None: not listed, no job asks for
        one)."""
        if self.ledger.licenses is None:
            return None
        left = dict(self.ledger.licenses)
        for sid in self.license_pins:
            take_licenses(left, self.ledger.slurm[sid].licenses)
        return left

    @functools.cached_property
    def users_kept_apart(self) -> bool:
        """Some node is one user's alone, or in a partition that keeps a node to one user: whose job it is
        then decides where it may start."""
        return any(n.owner or n.user_exclusive for n in self.ledger.nodes.values())

    @functools.cached_property
    def reserved_nodes(self) -> bool:
        """Some node has a reservation: jobs' time limits then decide where they may start."""
        return any(n.reserved for n in self.ledger.nodes.values())

    @functools.cached_property
    def first_limit_end(self) -> dict[str, dt.datetime]:
        """Per node, the first time limit of a job running on it (naive UTC): the CPUs and memory those
        jobs hold free up no sooner. Indexed once per round, for every waiting job no node has room for."""
        out: dict[str, dt.datetime] = {}
        for sj in self.ledger.slurm.values():
            end = _limit_end(sj) if phase(sj.state) == "running" else None
            if end is None:
                continue
            for n in sj.nodes:
                if n not in out or end < out[n]:
                    out[n] = end
        return out

    @functools.cached_property
    def last_limit_end(self) -> dict[tuple[str, str], dt.datetime | None]:
        """Per node and user, the last time limit of the user's jobs running there (naive UTC; None: one
        has no limit or start): a node one user's jobs keep (ExclusiveUser) is theirs until then."""
        out: dict[tuple[str, str], dt.datetime | None] = {}
        for sj in self.ledger.slurm.values():
            if phase(sj.state) != "running":
                continue
            end = _limit_end(sj)
            for n in sj.nodes:
                key = (n, sj.user)
                before = out.get(key, end)
                out[key] = None if end is None or before is None else max(before, end)
        return out

    @functools.cached_property
    def listing(self) -> Listing:
        """squeue's records for the dependency tests, indexed once for all the round's jobs."""
        return Listing(self.ledger.slurm)

    @classmethod
    def start(cls, ctx: ControllerContext, ledger: Ledger, now: dt.datetime) -> Round:
        alloc = ledger.cells
        return cls(
            ctx=ctx,
            ledger=ledger,
            now=now,
            alloc=alloc,
            builder=TaskBuilder(ctx, now),
            gmap=alloc.gpu_map(),
            by_sid={str(j.slurm_job_id): j for j in ledger.jobs.values()},
        )

    def add_note(self, slurm_id: int, note: str) -> None:
        """Tell the job's owner how it runs otherwise than asked (after its reason)."""
        old = self.run_notes.get(slurm_id)
        self.run_notes[slurm_id] = f"{old}; {note}" if old else note

    def node_size(self, gpu_type: str | None, sj: SlurmJob) -> NodeSize:
        """The most CPUs and memory one job of ``sj``'s partitions gets of a node there with GPUs of
        ``gpu_type`` (None: any), as Slurm reports them: a partition's MaxCPUsPerNode caps the CPUs
        (tests/fixtures/slurm/partition_max_cpus.txt)."""
        key = (gpu_type, sj.partition)
        if key not in self.size_by_type:
            names = {n.name for n in self.ctx.spec.nodes if gpu_type in (None, n.gpu_type)}
            seen = [n for name, n in self.ledger.nodes.items() if name in names and in_partitions(sj, n)]
            self.size_by_type[key] = NodeSize(
                max((job_cpus(sj, n) for n in seen), default=0),
                max((job_mem(sj, n) for n in seen), default=0),
            )
        return self.size_by_type[key]

    def nodes_of_type(self, gpu_type: str | None) -> frozenset[str]:
        """The cluster's nodes with GPUs of ``gpu_type`` (None: all), listed once per round: every waiting
        job is screened against them."""
        if gpu_type not in self.type_nodes:
            self.type_nodes[gpu_type] = frozenset(
                n.name for n in self.ctx.spec.nodes if gpu_type in (None, n.gpu_type)
            )
        return self.type_nodes[gpu_type]

    def unfit_for(self, job: Job, sj: SlurmJob) -> dict[str, str]:
        """The nodes ``job`` cannot use now (its needs besides GPUs, nodes Slurm did not start it on,
        nodes outside its owner's --nodelist)."""
        if job.slurm_job_id not in self.unfit:
            avoided = self.ledger.avoided.get(job.slurm_job_id, frozenset())
            wanted = _nodelist(sj)
            key = (
                needs_of(sj, self.users_kept_apart),
                avoided,
                wanted,
                sj.time_limit_s if self.reserved_nodes else None,
            )
            if key not in self.unfit_by_needs:
                self.unfit_by_needs[key] = unfit_nodes(sj, self.ledger.nodes, avoided, wanted, now=self.now)
            self.unfit[job.slurm_job_id] = self.unfit_by_needs[key]
        return self.unfit[job.slurm_job_id]

    def never_for(self, job: Job, sj: SlurmJob) -> dict[str, str]:
        """The nodes ``job`` can never use, whatever else runs (asked only of jobs that fit too few now)."""
        wanted = _nodelist(sj)
        key = (needs_of(sj), wanted)
        if key not in self.never_by_needs:
            self.never_by_needs[key] = unfit_nodes(sj, self.ledger.nodes, wanted=wanted, ever=True)
        return self.never_by_needs[key]

    def node_rooms(self) -> dict[str, NodeRoom]:
        """Each node's CPUs and memory left for the policy round: Slurm's free figures, less the pins
        it has not started (placed in earlier cycles and still pending, or earlier this cycle)."""
        taken_back = {tb.job.slurm_job_id for tb in self.out.take_backs}
        pins: dict[int, dict[str, list[int]]] = {
            job.slurm_job_id: job.placement
            for job in self.ledger.jobs.values()
            if job.state == "placed" and job.placement and job.slurm_job_id not in taken_back
        }
        pins.update({sid: p.placement for sid, p in self.placed_now.items()})
        pending = [
            (sj, nodes)
            for sid, nodes in pins.items()
            if (sj := self.ledger.slurm.get(sid)) is not None and phase(sj.state) == "pending"
        ]
        return node_rooms(self.ledger.nodes, pending)

    def add_place(self, place: Place) -> None:
        self.out.places.append(place)
        self.placed_now[place.job.slurm_job_id] = place


def _limit_end(sj: SlurmJob) -> dt.datetime | None:
    """When a running job reaches its time limit (naive UTC); None without a start or a limit."""
    if not sj.start_time or not sj.time_limit_s:
        return None
    end = (aware(sj.start_time) + dt.timedelta(seconds=sj.time_limit_s)).astimezone(dt.UTC)
    return end.replace(tzinfo=None)
