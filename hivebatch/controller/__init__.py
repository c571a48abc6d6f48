"""The hivebatch controller: the only writer of the ledger and the only one that places jobs in Slurm.

One cycle (``run_cycle``): observe Slurm → reconcile the ledger with it and rebuild the cell
allocator → decide with ``hivebatch.scheduler.schedule_round`` → act through the Slurm backend
(intent recorded first) → record. ``hivebatch controller run --once|--loop`` runs it (``runner``)
under the database lease (``lease``): one controller per database.
"""

from hivebatch.controller.cycle import CycleReport, run_cycle
from hivebatch.controller.lease import AlreadyRunning, ControllerLease, LeaseLost

__all__ = ["AlreadyRunning", "ControllerLease", "CycleReport", "LeaseLost", "run_cycle"]
