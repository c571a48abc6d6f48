"""Step 4: spare the policy and the cells the jobs that cannot start this cycle whatever they decide."""

from __future__ import annotations

import datetime as dt
from functools import partial

from hivebatch.cells import CellAllocator, ClusterSpec
from hivebatch.controller.decide.fit import (
    EXCLUDED,
    UNLISTED,
    clear_of_reservations,
    node_needs,
    unfit_text,
    users_keeping,
    why_unfit,
)
from hivebatch.controller.decide.isolate import isolated
from hivebatch.controller.decide.tasks import slurm_order, start_prediction
from hivebatch.controller.decide.types import GpuMap, Round, Wait
from hivebatch.db.models import Job
from hivebatch.request import JobRequest
from hivebatch.slurm.types import SlurmJob


class Room:
    """A quick upper bound on what could start now.

    A guaranteed job can use its VC's free cells plus the GPUs of lower-priority jobs of its VC
    (which it may preempt); an opportunistic job only free GPUs that no VC cell holds.
    """

    def __init__(self, alloc: CellAllocator, spec: ClusterSpec, gmap: GpuMap) -> None:
        self.free = {vc: int(alloc.vc_view(vc).gpus_free) for vc in spec.vcs}
        self.total = {vc: int(spec.vc_gpus(vc)) for vc in spec.vcs}
        self.by_prio: dict[str, dict[int, int]] = {}
        for st in alloc.jobs().values():
            if st.priority >= 0:
                d = self.by_prio.setdefault(st.vc, {})
                d[st.priority] = d.get(st.priority, 0) + int(st.gpus)
        self.unbound = sum(
            1
            for gpus in gmap.values()
            for use in gpus.values()
            if use.vc is None and use.job is None and not use.bad and not use.foreign
        )

    def preemptible(self, vc: str, priority: int) -> int:
        return sum(g for p, g in self.by_prio.get(vc, {}).items() if p < priority)

    def may_fit(self, req: JobRequest) -> bool:
        if req.priority < 0:
            return req.gpus <= self.unbound
        return req.gpus <= self.free.get(req.vc, 0) + self.preemptible(req.vc, req.priority)

    def reason(self, req: JobRequest) -> str:
        # no live counts in the text: a reason that changed with every start and finish would
        # make an event (and a log line) per waiting job per cycle
        if req.priority < 0:
            return f"waiting for idle GPUs: it needs {req.gpus}, fewer are free outside the VCs' cells now"
        return (
            f"waiting for VC {req.vc}'s GPUs: it needs {req.gpus} of the VC's {self.total.get(req.vc, 0)}, "
            "fewer are free now"
        )


def hopeless_wait(r: Round, room: Room, job: Job, req: JobRequest, sj: SlurmJob) -> Wait:
    """A job that cannot start this cycle: its reason, and its ECT and latency (computed once, then kept)."""
    lat: float | None = job.latency_s
    ect = job.expected_completion
    if lat is None or ect is None:
        new_lat, new_ect, _ = start_prediction(r, job, req, sj, None)
        if new_lat is not None:  # else the job still waits, without figures
            lat, ect = new_lat, new_ect
    slack = (ect - r.now).total_seconds() - lat if ect is not None and lat is not None else None
    shape_now = (job.shape_nodes, job.shape_gpn) if job.shape_nodes and job.shape_gpn else None
    return Wait(job, room.reason(req), shape=shape_now, slack_s=slack, ect=ect, latency_s=lat)


def screen_hopeless(r: Round) -> None:
    """Jobs that may fit become tasks for the policy round; the others wait with the reason why.

    With backfill on, each VC's oldest guaranteed job of the highest priority that cannot fit (one
    its owner did not nice, if any) goes to the round too: it may be its VC's head, and a head needs
    its reservation even when it cannot start (hivebatch.reservation). Only that one: planning every
    job that cannot start would cost the round its time on a long queue, and the others would wait
    anyway.
    """
    gmap = r.alloc.gpu_map() if r.requeued or r.slices else r.gmap
    room = Room(r.alloc, r.ctx.spec, gmap)
    heads: dict[str, tuple[Job, JobRequest, SlurmJob]] = {}
    for job, req, sj in r.fresh:
        isolated(r, job, partial(_screen_one, r, room, job, req, sj, heads))
    for job, req, sj in heads.values():
        isolated(r, job, partial(_to_round, r, job, req, sj))


def _head_key(job: Job, req: JobRequest, sj: SlurmJob) -> tuple[int, bool, float, int, int]:
    """Highest priority, then a job its owner did not nice (hivebatch.fairshare.by_nice), then oldest,
    then in Slurm's order (an array's tasks by index)."""
    submitted = job.submit_time.timestamp() if job.submit_time is not None else float("inf")
    return (-req.priority, sj.nice > 0, submitted, *slurm_order(sj))


def _usable_at(r: Round, sj: SlurmJob, name: str) -> dt.datetime | None:
    """When ``sj`` could start on node ``name`` at the soonest (None: not known): the CPUs and memory
    running jobs hold there free up no sooner than the first of their time limits, a node other users'
    jobs keep (ExclusiveUser) no sooner than the last of theirs, and it runs into no reservation there."""
    node = r.ledger.nodes.get(name)
    if node is None:
        return None
    held = r.first_limit_end.get(name) if why_unfit(sj, node) else r.now
    for user in users_keeping(sj, node) if held is not None else ():
        # a user only pinned there (not started yet) has no end: not known
        end = r.last_limit_end.get((name, user))
        held = max(held, end) if held is not None and end is not None else None
    return max(held, clear_of_reservations(sj, node, r.now)) if held is not None else None


def _to_round(r: Round, job: Job, req: JobRequest, sj: SlurmJob) -> None:
    task = r.builder.task(job, req, sj.time_limit_s, sj.nice, sj)
    task.avoid_nodes = frozenset(n for n in r.unfit_for(job, sj) if n in r.alloc.tree.node_cell)
    # the most nodes it may be placed on: its shape's, else one GPU on each, else (the policy picks its
    # GPUs) any node
    most = task.shape.d_node if task.shape is not None else task.gpus or max(len(r.ledger.nodes), 1)
    task.node_needs = node_needs(sj, min(most, sj.max_nodes) if sj.max_nodes else most)
    r.tasks.append(task)
    r.reqs[task.job_id] = (job, req)


def _screen_one(
    r: Round,
    room: Room,
    job: Job,
    req: JobRequest,
    sj: SlurmJob,
    heads: dict[str, tuple[Job, JobRequest, SlurmJob]],
) -> None:
    unfit = r.unfit_for(job, sj)
    of_type = r.nodes_of_type(req.gpu_type)
    need = req.nodes or 1
    if len(of_type - unfit.keys()) < need:
        never = r.never_for(job, sj)
        if len(of_type - never.keys()) < need:
            # Slurm refuses such a job at submit, but not a held one, as the plugin's are
            # its node list and excluded nodes stay the owner's to change while it waits
            chosen = any(why == EXCLUDED or why.startswith(UNLISTED) for why in never.values())
            fix = (
                f"change the nodes it lists or excludes (scontrol update JobId={sj.job_id} ReqNodeList=... "
                "or ExcNodeList=...), or cancel it and submit it again"
                if chosen
                else "cancel it and submit it again"
            )
            reason = f"can never run as asked: {unfit_text(never)}; {fix} with what the nodes have"
            r.out.waits.append(Wait(job, reason, rejected=True))
            return
    if not of_type - unfit.keys():
        wait = hopeless_wait(r, room, job, req, sj)
        wait.reason = f"no node has what it needs besides GPUs now: {unfit_text(unfit)}"
        # a node it can never use (outside its --nodelist …) frees nothing for it: seen on the lab, hq
        # said START "now" for a job pinned by -w to a node another user's job kept
        never = r.never_for(job, sj)
        usable = (_usable_at(r, sj, n) for n in of_type if n not in never)
        wait.not_before = min(filter(None, usable), default=None)
        r.out.waits.append(wait)
        return
    if room.may_fit(req):
        _to_round(r, job, req, sj)
        return
    if r.ctx.settings.backfill and req.priority >= 0 and req.gpus <= room.total.get(req.vc, 0):
        best = heads.get(req.vc)
        if best is None:
            heads[req.vc] = (job, req, sj)
            return
        if _head_key(job, req, sj) < _head_key(*best):
            heads[req.vc] = (job, req, sj)
            job, req, sj = best  # the candidate it replaces waits
    r.out.waits.append(hopeless_wait(r, room, job, req, sj))
