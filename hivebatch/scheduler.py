"""One scheduling round: the policy orders waiting tasks and picks shapes, the cell core binds GPUs.

This glue is shared by the controller (real Slurm) and the simulator (virtual clock), so both make
exactly the same decisions for the same state. It is pure: no DB, subprocess, click or rich.

For each plan, in the order the policy returns them, the shapes are tried in preference order with
``alloc.allocate``; the first shape that is placed wins. Otherwise the task waits with the cell
core's reason (or is rejected when no shape could ever be placed).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from hivebatch.cells import Request
    from hivebatch.qos import Plan, Platform, Shape, Task

OutcomeResult = Literal["placed", "waiting", "rejected"]


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


@dataclass
class _Round:
    """What every placement attempt in one round shares: the allocator, the clock and the refusals."""

    alloc: Allocator
    now: float
    platform: Platform
    prio: Callable[[Task], int]
    # Within a round the allocator's free capacity only shrinks (except through preemption), so a
    # request shape that was refused stays refused: remember it instead of asking again.
    refused: dict[tuple[str, int, int, str | None, int, frozenset[str]], Placement] = field(
        default_factory=dict
    )

    def allocate(self, task: Task, shape: Shape) -> Placement:
        """The allocator's answer for ``task`` on ``shape``, reusing a refusal seen this round."""
        from hivebatch.cells import Request

        key = (task.vc, shape.gpus, shape.d_node, task.gpu_type, self.prio(task), task.avoid_nodes)
        decision = self.refused.get(key)
        if decision is None:
            decision = self.alloc.allocate(
                Request(
                    job_id=str(task.job_id),
                    vc=task.vc,
                    gpus=shape.gpus,
                    nodes=shape.d_node,
                    gpu_type=task.gpu_type,
                    within=None,
                    priority=self.prio(task),
                    avoid_nodes=task.avoid_nodes,
                )
            )
            if decision.result != "placed":
                self.refused[key] = decision
            elif decision.preempted:
                self.refused.clear()  # preemption freed GPUs beyond what this job took
        return decision

    def place(self, plan: Plan) -> Outcome:
        """Try ``plan``'s shapes in preference order; the first placed wins, else wait or reject."""
        task = plan.task
        waiting_reason: str | None = None
        rejected_error: str | None = None
        for shape in plan.shapes:
            decision = self.allocate(task, shape)
            if decision.result == "placed":
                lat = _predicted_latency(plan, shape, self.platform)
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
            else:
                rejected_error = rejected_error or decision.error or "request can never be placed"
        if not plan.shapes:
            return Outcome(task, "waiting", reason="no shape fits the VC's limit now", slack=plan.slack)
        if waiting_reason is not None:
            return Outcome(task, "waiting", shape=plan.shapes[0], reason=waiting_reason, slack=plan.slack)
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
    if opportunistic:
        plans += list(policy.plan(opportunistic, now, platform, None))
    return plans


def schedule_round(
    tasks: Iterable[Task],
    now: float,
    alloc: Allocator,
    policy: Planner,
    platform: Platform,
    opportunistic_task_ids: Collection[str] = frozenset(),
    *,
    limits: Mapping[str, int] | None = None,
    priority_of: Callable[[Task], int] | None = None,
) -> list[Outcome]:
    """Plan the waiting ``tasks`` with ``policy`` and place them on ``alloc``, in the policy's order.

    ``limits`` (VC -> GPUs it may use now) is handed to the policy unchanged for guaranteed tasks;
    opportunistic tasks are planned after them, without limits. ``priority_of`` maps a
    task to its cell priority; by default tasks in ``opportunistic_task_ids`` get -1, others 0.
    A policy with ``strict_order = True`` (e.g. FIFO) blocks per VC: once one of a VC's tasks waits,
    that VC's later tasks wait too, so nothing overtakes the head of its queue.
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

    plans = _plan_in_order(task_list, now, policy, platform, limits, prio)
    strict = bool(getattr(policy, "strict_order", False))
    round_ = _Round(alloc, now, platform, prio)
    outcomes: list[Outcome] = []
    blocked_by: dict[str, str] = {}  # VC -> the task at the head of its queue that waits
    for plan in plans:
        task = plan.task
        if task.vc in blocked_by and prio(task) >= 0:
            head = blocked_by[task.vc]
            outcomes.append(
                Outcome(task, "waiting", reason=f"behind job {head} in arrival order", slack=plan.slack)
            )
            continue
        outcome = round_.place(plan)
        outcomes.append(outcome)
        if outcome.result == "waiting" and plan.shapes and strict and prio(task) >= 0:
            blocked_by[task.vc] = str(task.job_id)
    planned = {str(o.task.job_id) for o in outcomes}
    for task in task_list:
        if str(task.job_id) not in planned:
            outcomes.append(Outcome(task, "waiting", reason="the policy chose not to start it now"))
    return outcomes
