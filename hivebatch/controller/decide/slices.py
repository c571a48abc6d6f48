"""Step 3: GPU slices go through the sharing ledger.

Binpacked inside the VC's cells, opportunistic ones also co-located where the config allows.
Requeued slices keep their GPU index (Slurm keeps the typed ``shard:gN:k``), guaranteed work goes
first, then arrival order. Their predictions are a one-GPU job's (a plain job: its time limit).
"""

from __future__ import annotations

from functools import partial

from hivebatch.controller.decide.fit import node_needs, short_nodes, unfit_text
from hivebatch.controller.decide.frees import Frees
from hivebatch.controller.decide.isolate import isolated
from hivebatch.controller.decide.tasks import start_prediction
from hivebatch.controller.decide.times import after
from hivebatch.controller.decide.types import Place, Round, Wait
from hivebatch.controller.decide.victims import take_victims
from hivebatch.db.models import Job
from hivebatch.node_room import NodeRoom
from hivebatch.qos import Shape
from hivebatch.request import JobRequest
from hivebatch.sharing.gres import parse_shard_gres
from hivebatch.sharing.ledger import SharingLedger
from hivebatch.slurm.types import SlurmJob


def _place_one(
    r: Round,
    led: SharingLedger,
    rooms: dict[str, NodeRoom],
    frees: Frees,
    job: Job,
    req: JobRequest,
    sj: SlurmJob,
) -> None:
    # the same QoS figures as a one-GPU job: a plain slice's duration is its time limit
    lat, ect, slack = start_prediction(r, job, req, sj, Shape(1, 1))
    mem = int(req.gpu_mem_mib or 0)
    old = parse_shard_gres(job.gres or "") if job.placement else {}
    sid = str(job.slurm_job_id)
    # the nodes it cannot use besides GPUs, as for any job, and those whose CPUs or memory the pins
    # not started yet (slices placed before it among them) leave too little of
    needs = node_needs(sj)
    unfit = dict(r.unfit_for(job, sj))
    unfit.update({n: why for n, why in short_nodes(rooms, needs).items() if n not in unfit})
    avoid = frozenset(unfit)
    if len(old) == 1:
        ((gpu_index, _count),) = old.items()
        d = led.resume(
            sid, req.vc, mem, req.priority, gpu_index, nodes_first=sorted(job.placement or {}), avoid=avoid
        )
    else:
        d = led.place(sid, req.vc, mem, req.priority, req.gpu_type, avoid=avoid)
    if d.result != "placed":
        rejected = d.result == "rejected"
        reason = d.error or d.reason or "no GPU has room for the slice"
        if unfit and not rejected:
            reason += f"; it cannot use {unfit_text(unfit)}"
        r.out.waits.append(
            Wait(
                job,
                reason,
                rejected=rejected,
                shape=None if rejected else (1, 1),
                slack_s=None if rejected else slack,
                ect=None if rejected else ect,
                latency_s=None if rejected else lat,
                not_before=None if rejected or not unfit else frees.not_before(r, job, unfit),
            )
        )
        return
    end = after(r.now, lat)
    p = Place(job, d.placement, d.gres, (1, 1), predicted_end=end, slack_s=slack, ect=ect, resumed=bool(old))
    take_victims(r, p, d.preempted)
    r.add_place(p)
    for n in d.placement:
        if n in rooms:
            rooms[n].take(needs)


def place_slices(r: Round) -> None:
    led = r.ledger.sharing
    if not r.slices or led is None:
        return
    r.slices.sort(
        key=lambda x: (
            not (x[0].gres and x[0].placement),
            -x[1].priority,
            x[0].submit_time or r.now,
            x[0].slurm_job_id,
        )
    )
    rooms, frees = r.node_rooms(), Frees.of(r)
    for job, req, sj in r.slices:
        isolated(r, job, partial(_place_one, r, led, rooms, frees, job, req, sj))
