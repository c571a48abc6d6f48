"""Step 5: the QoS policy round — order, shapes and cell placement by ``hivebatch.scheduler.schedule_round``,
the same function the simulator uses."""

from __future__ import annotations

import datetime as dt

from hivebatch.controller.decide.tasks import predicted_latency
from hivebatch.controller.decide.times import epoch, finite, from_epoch
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.decide.victims import take_victims
from hivebatch.scheduler import Outcome, schedule_round


def _placed(r: Round, o: Outcome) -> None:
    job, _req = r.reqs[str(o.task.job_id)]
    slack = finite(o.slack)
    end = from_epoch(o.predicted_end)
    ect = end + dt.timedelta(seconds=slack) if end is not None and slack is not None else None
    shape = (o.shape.d_node, o.shape.d_gpn) if o.shape is not None else None
    p = Place(job, o.placement, None, shape, predicted_end=end, slack_s=slack, ect=ect)
    victims = [str(v) for v in o.preempted]
    if r.ledger.sharing is not None:
        # a share cell of the cell core stands for the slices on its GPU
        victims = r.ledger.sharing.translate_preempted(victims)
    take_victims(r, p, victims)
    r.add_place(p)


def _waiting(r: Round, o: Outcome) -> None:
    job, _req = r.reqs[str(o.task.job_id)]
    slack = finite(o.slack)
    lat = predicted_latency(o.task, o.shape or o.task.shape, r.ctx)
    ect = r.now + dt.timedelta(seconds=lat + slack) if lat is not None and slack is not None else None
    r.out.waits.append(
        Wait(
            job,
            o.reason or ("rejected by the cells" if o.result == "rejected" else "waiting for GPUs"),
            rejected=o.result == "rejected",
            shape=(o.shape.d_node, o.shape.d_gpn) if o.shape is not None else None,
            slack_s=slack,
            ect=ect,
            latency_s=lat,
        )
    )


def run_policy_round(r: Round) -> None:
    outcomes = schedule_round(
        r.tasks,
        epoch(r.now),
        r.alloc,
        r.ctx.policy,
        r.ctx.platform,
        {t.job_id for t in r.tasks if r.reqs[t.job_id][1].priority < 0},
        priority_of=lambda t: r.reqs[str(t.job_id)][1].priority,
    )
    for o in outcomes:
        if o.result == "placed":
            _placed(r, o)
        else:
            _waiting(r, o)
