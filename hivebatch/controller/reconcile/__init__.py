"""Step 2: make the DB ledger agree with what Slurm says (``jobs``), then rebuild the cell allocator
from it (``rebuild``). The ledger checked against Slurm is the truth about which job holds which GPUs;
the allocator is made to agree with it every cycle."""

from hivebatch.controller.ledger import Ledger
from hivebatch.controller.reconcile.jobs import sync_jobs
from hivebatch.controller.reconcile.rebuild import is_slice_job, rebuild_allocator

__all__ = ["Ledger", "is_slice_job", "rebuild_allocator", "sync_jobs"]
