"""When what keeps a waiting job off the nodes it cannot use now may change, for its predicted start.

The start estimate (estimate.py) counts GPUs only; a job whose VC has free GPUs but whose nodes lack
CPUs or memory beside them would be predicted to start now. Its soonest start is when a node it
cannot use frees what it lacks, or a job of its VC ends and the VC's cells may move.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hivebatch.controller.decide.types import Round
from hivebatch.db.models import Job


@dataclass
class Frees:
    """When what a waiting task cannot use now may change: per node, the soonest a job holding CPUs or
    memory there ends (at its time limit, or its predicted end when sooner);
    per VC, the soonest one of its jobs ends (its cells may move then), None when one has no known end."""

    node: dict[str, dt.datetime]
    vc: dict[str, dt.datetime | None]

    @classmethod
    def of(cls, r: Round) -> Frees:
        node = dict(r.first_limit_end)
        vc: dict[str, dt.datetime | None] = {}
        held = [(j.vc_name, j.placement, j.predicted_end) for j in r.ledger.jobs.values()
                if j.state in ("placed", "running") and not j.foreign]  # fmt: skip
        held += [(p.job.vc_name, p.placement, p.predicted_end) for p in r.placed_now.values()]
        for vc_name, placement, end in held:
            if vc_name:
                soonest = vc.get(vc_name, end)
                vc[vc_name] = None if end is None or soonest is None else min(end, soonest)
            if end is not None:
                for n in placement or {}:
                    node[n] = min(end, node.get(n, end))
        return cls(node, vc)

    def not_before(self, r: Round, job: Job, unfit: dict[str, str]) -> dt.datetime | None:
        """The soonest ``job`` may start though GPUs are free: when a node it cannot use now frees what it
        lacks, or a job of its VC ends. None when that is not known (a node or job without a known end),
        and when it cannot use a node only for reasons no job's end changes."""
        sj = r.ledger.slurm.get(job.slurm_job_id)
        if sj is None:
            return None
        never = r.never_for(job, sj)
        avoided = r.ledger.avoided.get(job.slurm_job_id, frozenset())
        nodes = [n for n in unfit if n not in never and n not in avoided]
        if not nodes or any(n not in self.node for n in nodes):
            return None
        ends = [self.node[n] for n in nodes]
        if job.vc_name in self.vc:
            vc_end = self.vc[job.vc_name]
            if vc_end is None:
                return None
            ends.append(vc_end)
        return max(min(ends), r.now)
