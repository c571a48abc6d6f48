"""Step 5: the QoS policy round — order, shapes and cell placement by ``hivebatch.scheduler.schedule_round``,
the same function the simulator uses."""

from __future__ import annotations

from functools import partial

from hivebatch.cells import JobState
from hivebatch.controller.decide.ends import running_ends
from hivebatch.controller.decide.fit import short_nodes, unfit_text
from hivebatch.controller.decide.frees import Frees
from hivebatch.controller.decide.isolate import isolated, reject
from hivebatch.controller.decide.tasks import predicted_latency
from hivebatch.controller.decide.times import after, epoch, finite, from_epoch
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.decide.victims import take_victims
from hivebatch.node_room import NodeRoom
from hivebatch.qos import Task
from hivebatch.scheduler import Outcome, lowest_priority, schedule_round, vc_free_gpus


def _placed(r: Round, o: Outcome) -> None:
    job, _req = r.reqs[str(o.task.job_id)]
    slack = finite(o.slack)
    end = from_epoch(o.predicted_end)
    ect = after(end, slack) if end is not None else None
    shape = (o.shape.d_node, o.shape.d_gpn) if o.shape is not None else None
    p = Place(job, o.placement, None, shape, predicted_end=end, slack_s=slack, ect=ect)
    victims = [str(v) for v in o.preempted]
    if r.ledger.sharing is not None:
        # a share cell of the cell core stands for the slices on its GPU
        victims = r.ledger.sharing.translate_preempted(victims)
    take_victims(r, p, victims)
    r.add_place(p)


def _short(r: Round, task: Task, rooms: dict[str, NodeRoom], known: dict[str, str]) -> dict[str, str]:
    """The nodes whose CPUs or memory the pins not started yet (this cycle's among them) leave too
    little of for ``task``, beside those it cannot use anyway (``known``)."""
    needs = task.node_needs
    if needs is None:
        return {}
    if needs not in r.short_by_needs:
        r.short_by_needs[needs] = short_nodes(rooms, needs)
    return {
        n: why for n, why in r.short_by_needs[needs].items() if n not in known and n in r.alloc.tree.node_cell
    }


def _waiting(r: Round, rooms: dict[str, NodeRoom], frees: Frees, o: Outcome) -> None:
    job, _req = r.reqs[str(o.task.job_id)]
    slack = finite(o.slack)
    lat = predicted_latency(o.task, o.shape or o.task.shape, r.ctx)
    ect = after(r.now, lat + slack) if lat is not None and slack is not None else None
    reason = o.reason or ("rejected by the cells" if o.result == "rejected" else "waiting for GPUs")
    unfit = dict(r.unfit.get(job.slurm_job_id, {})) if o.task.avoid_nodes else {}
    short = _short(r, o.task, rooms, unfit)
    unfit.update(short)
    if unfit and o.result != "rejected":
        reason += f"; it cannot use {unfit_text(unfit)}"
    # its GPUs may be free before the CPUs or memory beside them
    not_before = frees.not_before(r, job, unfit) if unfit and o.result != "rejected" else None
    r.out.waits.append(
        Wait(
            job,
            reason,
            rejected=o.result == "rejected",
            shape=(o.shape.d_node, o.shape.d_gpn) if o.shape is not None else None,
            slack_s=slack,
            ect=ect,
            latency_s=lat,
            reserved_start=from_epoch(o.predicted_start),
            not_before=not_before,
        )
    )


def _round(r: Round, tasks: list[Task]) -> list[Outcome]:
    settings = r.ctx.settings
    spec = r.ctx.spec
    # the VCs' free GPUs and lowest classes held, as the simulator hands them to the policy: the qos
    # policy's makespan guards need the former, a higher class keeps its shapes by the latter
    held = [s for s in r.alloc.jobs().values() if not s.opportunistic]
    return schedule_round(
        tasks,
        epoch(r.now),
        r.alloc,
        r.ctx.policy,
        r.ctx.platform,
        {t.job_id for t in tasks if r.reqs[t.job_id][1].priority < 0},
        limits=vc_free_gpus({vc: spec.vc_gpus(vc) for vc in spec.vcs}, ((s.vc, s.gpus) for s in held)),
        lowest=lowest_priority((s.vc, s.priority) for s in held),
        priority_of=lambda t: r.reqs[str(t.job_id)][1].priority,
        ends=running_ends(r) if settings.backfill else None,
        usage=r.ledger.usage,
        starve_after_s=settings.starve_after_s,
        found=r.found,
        rooms=r.node_rooms(),
    )


def _plannable(r: Round, task: Task) -> None:
    """Raise what the policy raises for this task alone (its numbers overflow the QoS model …)."""
    r.ctx.policy.plan([task], epoch(r.now), r.ctx.platform, None)


def _undo_partial_round(r: Round, before: dict[str, JobState]) -> None:
    """A round that failed half-way: give back what it placed, put back the victims it took off."""
    now = r.alloc.jobs()
    for jid in set(now) - set(before):
        r.alloc.release(jid)
    for jid, state in before.items():
        if jid not in now:
            r.alloc.adopt(jid, state.vc, state.priority, state.placement)


def _outcomes(r: Round) -> list[Outcome]:
    """The round's outcomes. When it fails, the tasks that fail alone are rejected and the round is
    run again without them; the others are planned as usual."""
    before = dict(r.alloc.jobs())
    try:
        return _round(r, r.tasks)
    except Exception:  # noqa: BLE001 - find the task(s) at fault; the rest of the queue goes on
        _undo_partial_round(r, before)
    good: list[Task] = []
    for task in r.tasks:
        job = r.reqs[task.job_id][0]
        try:
            _plannable(r, task)
            good.append(task)
        except Exception as exc:  # noqa: BLE001 - this task's own failure
            reject(r, job, exc)
    return _round(r, good)


def run_policy_round(r: Round) -> None:
    outcomes = _outcomes(r)
    for o in outcomes:
        if o.result == "placed":
            isolated(r, r.reqs[str(o.task.job_id)][0], partial(_placed, r, o))
    # what the round's pins leave, and when they go, for the tasks that wait
    rooms, frees = r.node_rooms(), Frees.of(r)
    for o in outcomes:
        if o.result != "placed":
            isolated(r, r.reqs[str(o.task.job_id)][0], partial(_waiting, r, rooms, frees, o))
