"""An srun or salloc hears in the terminal it waits in why its job waits, and why it was rejected.

Slurm shows such a client only "queued and waiting for resources"; the reason was only in ``hq``, and a
rejected job kept the client there for ever. ``scontrol notify`` reaches the client of a pending
interactive job (tests/fixtures/slurm/notify_pending_interactive.txt), but Slurm lets only root and
SlurmUser send it to another user's job: a controller run as the Operator leaves the reasons to ``hq``.
A batch job has no one to tell before it runs, so its owner reads them in ``hq`` as before.

A client is told a job's first reason to wait and a rejection, each once: later reasons of a waiting
job change with every job that starts or ends around it, too often for a terminal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from hivebatch.controller.decide.types import Wait
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import SlurmError, SlurmJob

log = logging.getLogger(__name__)


def tell_clients(backend: SlurmBackend, news: Iterable[Wait], slurm: Mapping[int, SlurmJob]) -> int:
    """Tell the client of each interactive job in ``news`` its reason; how many were told."""
    told = 0
    for w in news:
        sj = slurm.get(w.job.slurm_job_id)
        if sj is None or sj.batch:
            continue
        if not backend.may_notify_others():
            return told  # run as the Operator: Slurm would refuse it and log a security violation
        what = "cannot be placed" if w.rejected else "waits"
        try:
            backend.notify(sj.job_id, f"hivebatch: job {sj.display_id} {what}: {w.reason}")
        except SlurmError as exc:  # its client may have gone meanwhile; hq still says why
            log.info("could not tell job %s why it %s: %s", sj.display_id, what, exc)
            continue
        told += 1
    return told
