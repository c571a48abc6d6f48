"""An srun or salloc whose job the controller rejects hears why, in the terminal it waits in.

Slurm shows such a client only "queued and waiting for resources"; a rejected job would keep it there
for ever, with the reason only in ``hq``. ``scontrol notify`` reaches the client of a pending
interactive job (tests/fixtures/slurm/notify_pending_interactive.txt), but Slurm lets only root and
SlurmUser send it to another user's job: a controller run as the Operator leaves the reason to ``hq``.
A batch job has no one to tell before it runs, so its owner reads the reason in ``hq`` as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from hivebatch.controller.decide.types import Wait
from hivebatch.slurm.base import SlurmBackend
from hivebatch.slurm.types import SlurmError, SlurmJob

log = logging.getLogger(__name__)


def tell_rejected(backend: SlurmBackend, rejected: Iterable[Wait], slurm: Mapping[int, SlurmJob]) -> int:
    """Tell each interactive job in ``rejected`` (newly rejected this cycle) why; how many were told."""
    told = 0
    for w in rejected:
        sj = slurm.get(w.job.slurm_job_id)
        if sj is None or sj.batch:
            continue
        if not backend.may_notify_others():
            return told  # run as the Operator: Slurm would refuse it and log a security violation
        message = f"hivebatch: job {sj.display_id} cannot be placed: {w.reason}"
        try:
            backend.notify(sj.job_id, message)
        except SlurmError as exc:  # its client may have gone meanwhile; hq still says why
            log.info("could not tell job %s why it was rejected: %s", sj.display_id, exc)
            continue
        told += 1
    return told
