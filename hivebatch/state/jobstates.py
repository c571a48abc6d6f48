"""Job states, in one place and without SQLAlchemy (``hq`` imports this on every call).

The ledger's own states (what the controller decided) and Slurm's state names with squeue's short codes.
"""

from __future__ import annotations

JOB_STATES = ("queued", "placed", "running", "done", "failed", "preempted", "cancelled", "rejected")
ACTIVE_STATES = ("placed", "running")  # the job holds cells
WAITING_STATES = ("queued", "preempted", "rejected")  # held in Slurm, waiting for a placement
FINAL_STATES = ("done", "failed", "cancelled")

# the ledger's final states, as Slurm would name them
FINAL_TO_SLURM = {"done": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED"}

# squeue's compact state codes
SLURM_STATE_CODES = {
    "PENDING": "PD",
    "RUNNING": "R",
    "SUSPENDED": "S",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "CONFIGURING": "CF",
    "CANCELLED": "CA",
    "FAILED": "F",
    "TIMEOUT": "TO",
    "PREEMPTED": "PR",
    "NODE_FAIL": "NF",
    "BOOT_FAIL": "BF",
    "DEADLINE": "DL",
    "OUT_OF_MEMORY": "OOM",
    "REQUEUED": "RQ",
    "REQUEUE_HOLD": "RH",
    "REQUEUE_FED": "RF",
    "RESIZING": "RS",
    "REVOKED": "RV",
    "SIGNALING": "SI",
    "SPECIAL_EXIT": "SE",
    "STAGE_OUT": "SO",
    "STOPPED": "ST",
}
SLURM_ACTIVE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_HOLD",
)
