"""One scheduling round: the policy orders waiting tasks and picks shapes, the cell core binds GPUs.

This glue is shared by the controller (real Slurm) and the simulator (virtual clock), so both make
exactly the same decisions for the same state. It is pure: no DB, subprocess, click or rich.

For each plan, in the order the policy returns them, the shapes are tried in preference order with
``alloc.allocate``; the first shape that is placed wins. Otherwise the task waits with the cell
core's reason (or is rejected when no shape could ever be placed).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from hivebatch.fairshare import by_nice, reorder
from hivebatch.node_room import NodeNeeds, NodeRoom
from hivebatch.reservation import DEFAULT_STARVE_AFTER_S, Forkable, Reservation, Scratch, reserve

if TYPE_CHECKING:
    from hivebatch.cells import Request
    from hivebatch.qos import Plan, Platform, Shape, Task

OutcomeResult = Literal["placed", "waiting", "rejected"]


# what a refusal is remembered by within a round: VC, GPUs, nodes, GPU type, priority, nodes to avoid
RefusalKey = tuple[str, int, int, str | None, int, frozenset[str]]


class Placement(Protocol):
    """What a round reads of an allocator's answer (hivebatch.cells.Decision)."""

    @property
    def result(self) -> str: ...
    @property
    def placement(self) -> dict[str, list[int]]: ...
    @property
    def preempted(self) -> list[str]: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def leaving_until(self) -> float | None: ...


class Allocator(Protocol):
    """What a round needs of the allocator: the cell core, or the simulator's quota pool."""

    def allocate(self, req: Request) -> Placement: ...


class Planner(Protocol):
    """A QoS policy (hivebatch.qos.policies): orders the tasks and picks their shapes."""

    def plan(
        self, tasks: list[Task], now: float, platform: Platform, limits: dict[str, int] | None
    ) -> Iterable[Plan]: ...


OPPORTUNISTIC_PRIORITY = -1
GUARANTEED_PRIORITY = 0


@dataclass
class Outcome:
    """What one scheduling round decided for one task."""

    task: Task
    result: OutcomeResult
    shape: Shape | None = None
    placement: dict[str, list[int]] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    reason: str | None = None
    predicted_start: float | None = None
    predicted_end: float | None = None
    slack: float | None = None
    leaving: bool = False  # waiting only for victims serving their notice: it starts when they leave

    @property
    def job_id(self) -> str:
        return str(self.task.job_id)


def _predicted_latency(plan: Plan, shape: Shape, platform: Platform) -> float:
    """Latency of the task on ``shape``: the plan's figure for its first choice, the model otherwise."""
    if shape == plan.shapes[0]:
        return float(plan.predicted_latency_s)
    task = plan.task
    if task.model is not None and task.batch is not None and task.iters is not None:
        from hivebatch.qos import latency

        return float(latency(task.model, task.batch, task.iters, shape, platform.overhead_s))
    if task.time_limit_s is not None:
        return float(task.time_limit_s)
    return float(plan.predicted_latency_s)


def default_priority(task: Task, opportunistic_task_ids: Collection[str]) -> int:
    """Opportunistic tasks get -1 (preemptible, may use any free GPU); all others are guaranteed."""
    return OPPORTUNISTIC_PRIORITY if str(task.job_id) in opportunistic_task_ids else GUARANTEED_PRIORITY


def vc_free_gpus(vc_gpus: Mapping[str, int], held: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Each VC's GPUs that its guaranteed jobs do not hold (``held``: VC and GPUs of each such job).

    These are the ``limits`` of a round: what a VC's guaranteed tasks may be planned on now. GPUs of
    its cells lent to opportunistic jobs count as free, as the cell core takes them back for it.
    """
    used = dict.fromkeys(vc_gpus, 0)
    for vc, gpus in held:
        if vc in used:
            used[vc] += gpus
    return {vc: max(0, n - used[vc]) for vc, n in vc_gpus.items()}


def lowest_priority(held: Iterable[tuple[str, int]]) -> dict[str, int]:
    """VC -> the lowest cell priority among its guaranteed jobs holding GPUs (``held``: VC and priority
    of each): the ``lowest`` of a round, as a higher class may take those jobs' GPUs."""
    out: dict[str, int] = {}
    for vc, priority in held:
        out[vc] = min(priority, out.get(vc, priority))
    return out


@dataclass
class _Round:
    """What every placement attempt in one round shares: the allocator, the clock and the refusals."""

    alloc: Allocator
    now: float
    platform: Platform
    prio: Callable[[Task], int]
    # Within a round the allocator's free capacity only shrinks (except through preemption), so a
    # request shape that was refused stays refused: remember it instead of asking again.
    refused: dict[RefusalKey, Placement] = field(default_factory=dict)
    # Shapes that would delay their VC's reservation whatever their length (see Reservation.admits)
    delaying: set[RefusalKey] = field(default_factory=set)
    ends: dict[str, float] = field(default_factory=dict)  # expected end of every job holding GPUs
    scratch: Scratch | None = None  # the allocator copy the round's reservations walk on
    # the cells as the cycle found them, when the caller placed jobs before the round (see heads)
    found: Forkable | None = None
    # node -> its CPUs and memory left, less what the round's placements take (hivebatch.node_room)
    rooms: dict[str, NodeRoom] = field(default_factory=dict)
    cramped: dict[NodeNeeds, frozenset[str]] = field(default_factory=dict)  # needs -> nodes without room

    def avoid(self, task: Task) -> frozenset[str]:
        """The nodes ``task`` cannot use: its own, and those whose CPUs or memory it does not fit in now."""
        needs = task.node_needs
        if not self.rooms or needs is None:
            return task.avoid_nodes
        if needs not in self.cramped:
            self.cramped[needs] = frozenset(n for n, room in self.rooms.items() if not room.fits(needs))
        cramped = self.cramped[needs]
        return task.avoid_nodes | cramped if cramped else task.avoid_nodes

    def take_room(self, task: Task, nodes: Iterable[str]) -> None:
        """What ``task``, placed on ``nodes``, takes of each."""
        if task.node_needs is None or not self.rooms:
            return
        for name in nodes:
            if name in self.rooms:
                self.rooms[name].take(task.node_needs)
        self.cramped.clear()

    def _key(self, task: Task, shape: Shape) -> RefusalKey:
        return (task.vc, shape.gpus, shape.d_node, task.gpu_type, self.prio(task), self.avoid(task))

    def request(self, task: Task, shape: Shape) -> Request:
        from hivebatch.cells import Request

        return Request(
            job_id=str(task.job_id),
            vc=task.vc,
            gpus=shape.gpus,
            nodes=shape.d_node,
            gpu_type=task.gpu_type,
            within=None,
            priority=self.prio(task),
            avoid_nodes=self.avoid(task),
        )

    def allocate(self, task: Task, shape: Shape) -> Placement:
        """The allocator's answer for ``task`` on ``shape``, reusing a refusal seen this round."""
        key = self._key(task, shape)
        decision = self.refused.get(key)
        if decision is None:
            decision = self.alloc.allocate(self.request(task, shape))
            if decision.result != "placed":
                self.refused[key] = decision
            elif decision.preempted:
                self.refused.clear()  # preemption freed GPUs beyond what this job took
                self.delaying.clear()
        return decision

    def admitted(self, plan: Plan, shape: Shape, res: Reservation) -> bool:
        """Whether ``plan``'s task on ``shape`` leaves ``res``'s head its start time."""
        end = self.now + _predicted_latency(plan, shape, self.platform)
        if end <= res.shadow.start:
            return True  # gone before the head starts
        key = self._key(plan.task, shape)
        if key in self.delaying:  # as long a job on the same shape was refused: no need to ask again
            return False
        assert isinstance(self.alloc, Forkable)
        req = self.request(plan.task, shape)
        d = self.alloc.try_allocate(req)
        if d.result != "placed":
            return True  # it delays nothing: the allocator says why it waits
        if res.admits(req, {n: sorted(g) for n, g in d.placement.items()}, end):
            return True
        self.delaying.add(key)
        return False

    def fits_now(self, plan: Plan) -> bool:
        """Whether any of ``plan``'s shapes could be placed on the cells as the cycle found them (asking
        only; nothing is placed)."""
        alloc = self.found if self.found is not None else self.alloc
        assert isinstance(alloc, Forkable)
        return any(alloc.try_allocate(self.request(plan.task, s)).result == "placed" for s in plan.shapes)

    def reserve(self, plan: Plan) -> Reservation | None:
        """A reservation for ``plan``'s task on its first shape (None: no start known).

        All reservations of a round share one allocator copy: each walk releases only its own VC's
        jobs, and VCs do not share cells, so one VC's walk does not change another's answer.
        """
        assert isinstance(self.alloc, Forkable)
        if self.scratch is None:
            self.scratch = self.alloc.fork()
        req = self.request(plan.task, plan.shapes[0])
        return reserve(self.scratch, req, self.ends, self.now, str(plan.task.job_id))

    def heads(self, plans: list[Plan], starve_after_s: float) -> tuple[dict[str, Reservation], set[str]]:
        """Each VC's head and its reservation, before anything is placed this round.

        The head is the VC's guaranteed task of the highest cell priority that arrived first among
        those waiting ``starve_after_s`` or longer; a starving head that can start now is put in the
        second set instead (it starts before the VC's other tasks, so none takes its room). A VC
        without a starving task has as head its first task in the policy's order that cannot start
        now. A head whose start nobody can tell (a job it waits for has no known end) gets none.
        """
        guaranteed = [p for p in plans if p.shapes and self.prio(p.task) >= 0]
        starving = sorted(
            (p for p in guaranteed if self.now - p.task.arrival >= starve_after_s),
            key=lambda p: (-self.prio(p.task), p.task.arrival, *p.task.tie),
        )
        decided: set[str] = set()
        reserved: dict[str, Reservation] = {}
        first: set[str] = set()
        for plan in starving + guaranteed:
            vc = plan.task.vc
            if vc in decided:
                continue
            starved = self.now - plan.task.arrival >= starve_after_s
            if self.fits_now(plan):
                if starved:
                    first.add(str(plan.task.job_id))
                    decided.add(vc)
                continue
            decided.add(vc)
            res = self.reserve(plan)
            if res is not None:
                reserved[vc] = res
        return reserved, first

    def place(self, plan: Plan, res: Reservation | None = None) -> Outcome:
        """Try ``plan``'s shapes in preference order; the first placed wins, else wait or reject.

        With ``res`` (the reservation of the task's VC) a shape is tried only if it does not delay it.
        """
        task = plan.task
        waiting_reason: str | None = None
        rejected_error: str | None = None
        leaving: float | None = None  # the last shape tried waits on a notice (an earlier one is withdrawn)
        for shape in plan.shapes:
            if (
                res is not None
                and self._key(task, shape) not in self.refused
                and not self.admitted(plan, shape, res)
            ):
                waiting_reason = waiting_reason or res.refusal()
                continue
            decision = self.allocate(task, shape)
            if decision.result == "placed":
                lat = _predicted_latency(plan, shape, self.platform)
                self.ends[str(task.job_id)] = self.now + lat
                self.take_room(task, decision.placement)
                return Outcome(
                    task,
                    "placed",
                    shape=shape,
                    placement={n: sorted(g) for n, g in decision.placement.items()},
                    preempted=list(decision.preempted),
                    predicted_start=self.now,
                    predicted_end=self.now + lat,
                    slack=plan.slack,
                )
            if decision.result == "waiting":
                waiting_reason = waiting_reason or decision.reason or "no free cells for this shape"
                leaving = decision.leaving_until
            else:
                rejected_error = rejected_error or decision.error or "request can never be placed"
        if not plan.shapes:
            reason = f"waiting for VC {task.vc}'s GPUs: fewer are free now than it needs"
            return Outcome(task, "waiting", reason=reason, slack=plan.slack)
        if waiting_reason is not None:
            return Outcome(task, "waiting", shape=plan.shapes[0], reason=waiting_reason, slack=plan.slack,
                           leaving=leaving is not None)  # fmt: skip
        return Outcome(
            task,
            "rejected",
            reason=rejected_error or "the policy found no placement for this task",
            slack=plan.slack,
        )


def _plan_in_order(
    task_list: list[Task],
    now: float,
    policy: Planner,
    platform: Platform,
    limits: Mapping[str, int] | None,
    prio: Callable[[Task], int],
    reserving: bool = False,
    lowest: Mapping[str, int] | None = None,
) -> list[Plan]:
    """The policy's plans: guaranteed tasks (under ``limits``) first, then opportunistic ones."""
    guaranteed = [t for t in task_list if prio(t) >= 0]
    opportunistic = [t for t in task_list if prio(t) < 0]
    # Guaranteed work goes first: an opportunistic job placed earlier in the same round would only be
    # preempted again by a guaranteed job later in the round. Opportunistic jobs are planned without
    # the VC limits: they run on any free GPU, outside their VC's cells.
    plans = (
        list(policy.plan(guaranteed, now, platform, dict(limits) if limits is not None else None))
        if guaranteed
        else []
    )
    if reserving and limits is not None and not all(p.shapes for p in plans):
        plans = _unlimited_order(plans, guaranteed, now, policy, platform)
    elif limits is not None and lowest:
        plans = _outranking_shapes(plans, guaranteed, now, policy, platform, lowest, prio)
    if opportunistic:
        plans += list(policy.plan(opportunistic, now, platform, None))
    return plans


def _unlimited_order(
    plans: list[Plan], guaranteed: list[Task], now: float, policy: Planner, platform: Platform
) -> list[Plan]:
    """The plans in the order the policy gives without limits, each keeping its shapes under them.

    A task larger than its VC's free GPUs gets no shape under the limits, and the policies put such
    plans last: a stream of small jobs would then always come first and the large one would never
    become its VC's head. Without limits it keeps its place in the queue (and the shapes it needs
    for its reservation); tasks the limits leave shapes for keep those.
    """
    limited = {str(p.task.job_id): p for p in plans}
    out: list[Plan] = []
    for free in policy.plan(guaranteed, now, platform, None):
        mine = limited[str(free.task.job_id)]
        out.append(mine if mine.shapes else free)
    return out


def _outranking_shapes(
    plans: list[Plan],
    guaranteed: list[Task],
    now: float,
    policy: Planner,
    platform: Platform,
    lowest: Mapping[str, int],
    prio: Callable[[Task], int],
) -> list[Plan]:
    """The plans, each task the limits leave no shape but that ranks above a guaranteed job of its VC
    given its shapes without limits: the limits count that job's GPUs as taken, and the cell core may
    give them to the higher class."""

    def outranks(p: Plan) -> bool:
        return not p.shapes and p.task.vc in lowest and prio(p.task) > lowest[p.task.vc]

    if not any(outranks(p) for p in plans):
        return plans
    free = {str(p.task.job_id): p for p in policy.plan(guaranteed, now, platform, None)}
    return [free[str(p.task.job_id)] if outranks(p) else p for p in plans]


def _turns(p: Plan, prio: Callable[[Task], int]) -> tuple[str | None, str, bool, bool]:
    """The group whose turns in the policy's order a plan shares: its VC (None: opportunistic, on any
    VC's idle GPUs) and class, and whether it has shapes and can still meet its expected completion."""
    return (p.task.vc if prio(p.task) >= 0 else None, p.task.cls, bool(p.shapes), p.meets_qos)


def _fair(plans: list[Plan], usage: Mapping[str, float], prio: Callable[[Task], int]) -> list[Plan]:
    """Guaranteed plans of one VC and class re-ordered by their users' recent usage, in their own slots.

    Plans that can still meet their expected completion and plans that cannot are separate groups:
    fairshare decides whose job goes first, not whose job is given up on.
    """
    return reorder(
        plans,
        lambda p: _turns(p, prio) if prio(p.task) >= 0 else None,
        lambda p: p.task.user,
        usage,
    )


def _niced(plans: list[Plan], prio: Callable[[Task], int]) -> list[Plan]:
    """Plans of one VC and class (and opportunistic ones together) with Slurm's nice applied in their
    own slots: the policy still decides which group goes first, the owner which of their jobs."""
    return by_nice(
        plans,
        lambda p: _turns(p, prio),
        lambda p: p.task.user,
        lambda p: p.task.nice,
    )


def schedule_round(
    tasks: Iterable[Task],
    now: float,
    alloc: Allocator,
    policy: Planner,
    platform: Platform,
    opportunistic_task_ids: Collection[str] = frozenset(),
    *,
    limits: Mapping[str, int] | None = None,
    lowest: Mapping[str, int] | None = None,
    priority_of: Callable[[Task], int] | None = None,
    ends: Mapping[str, float] | None = None,
    usage: Mapping[str, float] | None = None,
    starve_after_s: float = DEFAULT_STARVE_AFTER_S,
    found: Forkable | None = None,
    rooms: Mapping[str, NodeRoom] | None = None,
) -> list[Outcome]:
    """Plan the waiting ``tasks`` with ``policy`` and place them on ``alloc``, in the policy's order.

    ``limits`` (VC -> GPUs it may use now) is handed to the policy unchanged for guaranteed tasks;
    opportunistic tasks are planned after them, without limits. ``lowest`` (VC -> the lowest cell
    priority among its guaranteed jobs holding GPUs): a task ranked above it may take that job's GPUs,
    so it keeps shapes the limits would leave it none of. ``priority_of`` maps a
    task to its cell priority; by default tasks in ``opportunistic_task_ids`` get -1, others 0.
    A policy with ``strict_order = True`` (e.g. FIFO) blocks per VC: once one of a VC's tasks waits,
    that VC's later tasks wait too, so nothing overtakes the head of its queue.
    ``ends`` (job id -> expected end, epoch s, of each job holding GPUs) turns on backfill
    reservations (hivebatch.reservation) when ``alloc`` can be copied: each VC's head (its first
    guaranteed task that waits, or its oldest one once that has waited ``starve_after_s``) is given
    a start time, and the VC's other tasks start only if they do not delay it. ``usage`` (user -> recent GPU-hours, hivebatch.fairshare) turns on fairshare: the
    guaranteed tasks of one VC and class take their group's turns lowest usage first.
    ``found``: a copy of ``alloc`` taken before the caller placed other jobs in the same cycle (the
    controller resumes requeued jobs first); the heads are the tasks that do not fit *there*, as
    they are in the simulator, which places those jobs in the round. A job resumed a moment earlier
    would otherwise turn a task that fitted when the cycle began into its VC's head, whose
    reservation then holds back the tasks ranked before it.
    ``rooms`` (node -> its CPUs and memory free): each placed task's ``node_needs`` are taken from its
    nodes, and a later task does not get a node it no longer fits on (hivebatch.node_room).
    Placements (and the preemptions they cause) are applied to ``alloc``; the caller requeues the
    jobs listed in ``Outcome.preempted``.
    """
    task_list = list(tasks)
    if not task_list:
        return []
    opp_ids = {str(i) for i in opportunistic_task_ids}

    def prio(task: Task) -> int:
        if priority_of is not None:
            return priority_of(task)
        return default_priority(task, opp_ids)

    reserving = ends is not None and isinstance(alloc, Forkable)
    plans = _plan_in_order(task_list, now, policy, platform, limits, prio, reserving, lowest)
    if usage is not None:
        plans = _fair(plans, usage, prio)
    if any(p.task.nice for p in plans):
        plans = _niced(plans, prio)
    strict = bool(getattr(policy, "strict_order", False))
    round_ = _Round(alloc, now, platform, prio, ends=dict(ends or {}), found=found,
                    rooms={n: replace(r) for n, r in (rooms or {}).items()})  # fmt: skip
    reserved, first = round_.heads(plans, starve_after_s) if reserving else ({}, set())
    first |= _claimants(alloc, plans, prio)
    if first:
        plans = _heads_first(plans, first, prio)
    heads = _Heads(reserved, platform)
    outcomes: list[Outcome] = []
    blocked_by: dict[str, str] = {}  # VC -> the task at the head of its queue that waits
    # VC -> a task waiting for its victims to leave, and its cell priority: the VC's tasks it outranks
    # or equals wait behind it, since any GPUs of the VC they took it would take back with a new notice
    noticed: dict[str, tuple[str, int]] = {}
    for plan in plans:
        task = plan.task
        if task.vc in blocked_by and prio(task) >= 0:
            head = blocked_by[task.vc]
            outcomes.append(
                Outcome(task, "waiting", reason=f"behind job {head} in arrival order", slack=plan.slack)
            )
            continue
        if task.vc in noticed and 0 <= prio(task) <= noticed[task.vc][1]:
            head = noticed[task.vc][0]
            reason = f"behind job {head}, which waits for the jobs it preempted to leave"
            outcomes.append(Outcome(task, "waiting", reason=reason, slack=plan.slack))
            continue
        outcome = heads.place(round_, plan)
        outcomes.append(outcome)
        if outcome.result == "waiting" and plan.shapes and strict and prio(task) >= 0:
            blocked_by[task.vc] = task.name
        if outcome.result == "waiting" and outcome.leaving and prio(task) >= 0:
            noticed.setdefault(task.vc, (task.name, prio(task)))
    planned = {str(o.task.job_id) for o in outcomes}
    for task in task_list:
        if str(task.job_id) not in planned:
            outcomes.append(Outcome(task, "waiting", reason="the policy chose not to start it now"))
    return outcomes


class _Heads:
    """The round's reservations, as the tasks of their VCs come up in the policy's order.

    A head binds every other task of its VC that may not preempt it, those the policy ranks before
    it too: the head was found before anything was placed, and a task ranked before it that would
    delay it may not start either. (Exempting those tasks, as EASY backfill exempts the jobs ahead
    of its head, was measured on the simulator's starvation workload: the QoS rate fell by 0.5 to
    2.2 points more and the 8-GPU jobs waited longer, since long jobs started across the head's
    start pushed it back round after round.)
    """

    def __init__(self, reserved: dict[str, Reservation], platform: Platform) -> None:
        self.reserved = reserved
        self.platform = platform

    def place(self, round_: _Round, plan: Plan) -> Outcome:
        task = plan.task
        res = self.reserved.get(task.vc)
        if res is None:
            return round_.place(plan)
        if res.job_id != str(task.job_id):
            return round_.place(plan, res if 0 <= round_.prio(task) <= res.head.priority else None)
        outcome = round_.place(plan)  # a preemption earlier in the round may have made room
        if outcome.result == "waiting" and not outcome.leaving:  # a notice says more than a reservation
            _mark_reserved(outcome, res, plan, self.platform)
        else:
            del self.reserved[task.vc]
        return outcome


def _claimants(alloc: Allocator, plans: list[Plan], prio: Callable[[Task], int]) -> set[str]:
    """Guaranteed tasks that told victims to leave and still wait. They go first in their VC: a victim
    that left gives its GPUs back, and a task ranked before the claimant would take them (and be told
    to leave in turn, round after round)."""
    claims: frozenset[str] = getattr(getattr(alloc, "notice", None), "claimants", frozenset())
    return {str(p.task.job_id) for p in plans if str(p.task.job_id) in claims and prio(p.task) >= 0}


def _heads_first(plans: list[Plan], first: set[str], prio: Callable[[Task], int]) -> list[Plan]:
    """``plans`` with each head in ``first`` moved before the first task of its VC it may not preempt."""
    out = list(plans)
    for head in [p for p in plans if str(p.task.job_id) in first]:
        out.remove(head)
        rank = prio(head.task)
        at = next(
            (i for i, p in enumerate(out) if p.task.vc == head.task.vc and 0 <= prio(p.task) <= rank),
            len(out),
        )
        out.insert(at, head)
    return out


def _mark_reserved(outcome: Outcome, res: Reservation, plan: Plan, platform: Platform) -> None:
    """The head's outcome says when and where it is expected to start."""
    outcome.reason = res.reason()
    outcome.predicted_start = res.shadow.start
    outcome.predicted_end = res.shadow.start + _predicted_latency(plan, plan.shapes[0], platform)
