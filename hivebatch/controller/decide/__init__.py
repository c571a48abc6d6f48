"""Step 3 of a cycle: choose what to start, where, and what to preempt.

The queue is every held hsub job of the ledger that waits (queued, preempted or rejected last time).
``decide`` runs ``STEPS`` in order on one ``Round``; each step is its own module and reads or adds to
the round's decisions:

0. ``prime_notices``  — what each running job would lose if preempted, and the notice it would get;
0. ``take_back_unstarted``— placed jobs Slurm has not started in time give their cells back;
1. ``classify``       — check each request against the config and Slurm (a bad one gets its reason)
                        and sort the queue: GPU slices, requeued jobs with a typed gres, the rest;
2. ``resume_requeued``— requeued jobs resume on the GPU indices they had, before newer work;
3. ``place_slices``   — GPU slices through the sharing ledger;
4. ``screen_hopeless``— jobs that cannot start whatever the policy says wait without costing it;
5. ``run_policy_round``— the rest through ``hivebatch.scheduler.schedule_round`` (the simulator's too);
   ``hold_back_licensed``— placements beyond the licenses free wait instead;
   ``collect_notices``— the running victims the round told to leave (act signals them);
6. ``settle_gres``    — each placement's Slurm GRES;
7. ``attach_notes``   — what the profile store said about a job's model reaches its owner;
8. ``estimate_starts``— predicted starts of the jobs left waiting;
9. ``suggest_opportunistic``— a job its VC has no room for, which idle GPUs would take as
                        opportunistic work now, is told how to move there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from hivebatch.cells.resume import symmetric_indices
from hivebatch.controller.context import ControllerContext
from hivebatch.controller.decide.checks import check_request
from hivebatch.controller.decide.classify import classify
from hivebatch.controller.decide.estimate import estimate_starts
from hivebatch.controller.decide.gres import gres_for
from hivebatch.controller.decide.licenses import hold_back_licensed
from hivebatch.controller.decide.notice import collect_notices, prime_notices
from hivebatch.controller.decide.opportunistic import suggest_opportunistic
from hivebatch.controller.decide.policy_round import run_policy_round
from hivebatch.controller.decide.resume import resume_requeued
from hivebatch.controller.decide.room import Room, screen_hopeless
from hivebatch.controller.decide.settle import attach_notes, settle_gres
from hivebatch.controller.decide.slices import place_slices
from hivebatch.controller.decide.tasks import TaskBuilder, default_shape, plain_shape
from hivebatch.controller.decide.types import Decisions, Place, Round, Wait
from hivebatch.controller.decide.unstarted import take_back_unstarted
from hivebatch.controller.ledger import Ledger

Step = Callable[[Round], None]

STEPS: tuple[Step, ...] = (
    prime_notices,
    take_back_unstarted,
    classify,
    resume_requeued,
    place_slices,
    screen_hopeless,
    run_policy_round,
    hold_back_licensed,
    collect_notices,
    settle_gres,
    attach_notes,
    estimate_starts,
    suggest_opportunistic,
)


def decide(ctx: ControllerContext, ledger: Ledger, now: dt.datetime) -> Decisions:
    r = Round.start(ctx, ledger, now)
    for step in STEPS:
        step(r)
    return r.out


__all__ = [
    "STEPS",
    "Decisions",
    "Place",
    "Room",
    "Round",
    "Step",
    "TaskBuilder",
    "Wait",
    "check_request",
    "decide",
    "default_shape",
    "gres_for",
    "plain_shape",
    "symmetric_indices",
]
