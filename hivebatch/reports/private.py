"""How long a VC's jobs would have queued had the VC been a private cluster of exactly its GPUs.

The estimate replays the VC's own guaranteed jobs, with the run times they really had, on a private
pool of the VC's reserved GPUs: jobs are taken in submission order and each starts at the first
moment enough GPUs are free (first come, first served, no backfill past an earlier waiting job).
GPU counts are used, not cell shapes: the cell core guarantees that any request a VC's cells can
hold is placeable, so for the VC's own jobs the count is what limits them. The difference between
the real mean queuing delay and this private one is the VC's *excess* queuing delay: positive
means sharing the cluster cost the VC time, negative means it gained.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class PrivateJob:
    job_id: str
    submit: datetime
    gpus: int
    run_s: float


def private_queue_delays(jobs: list[PrivateJob], capacity: int) -> dict[str, float]:
    """Queuing delay (seconds) of each job on a private pool of ``capacity`` GPUs.

    Jobs larger than the pool could never run privately and are left out of the answer.
    """
    fitting = sorted((j for j in jobs if 0 < j.gpus <= capacity), key=lambda j: (j.submit, j.job_id))
    if not fitting:
        return {}
    origin = min(j.submit for j in fitting)
    free = capacity
    running: list[tuple[float, int]] = []  # (end time in s from origin, gpus)
    clock = 0.0
    delays: dict[str, float] = {}
    for job in fitting:
        arrival = (job.submit - origin).total_seconds()
        # FCFS: a job never starts before the one submitted ahead of it.
        clock = max(clock, arrival)
        while running and running[0][0] <= clock:
            free += heapq.heappop(running)[1]
        while free < job.gpus:
            end, gpus = heapq.heappop(running)
            clock = max(clock, end)
            free += gpus
        free -= job.gpus
        heapq.heappush(running, (clock + job.run_s, job.gpus))
        delays[job.job_id] = clock - arrival
    return delays
