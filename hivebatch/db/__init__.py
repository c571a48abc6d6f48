"""The hivebatch ledger (SQLAlchemy 2.0 models, engines, migrations).

The controller is the only writer; hq and hadmin open it with :func:`read_only_session`.
"""

from hivebatch.db.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    GPU_KINDS,
    JOB_STATES,
    WAITING_STATES,
    Base,
    CellSnapshot,
    ControllerState,
    Event,
    GpuBinding,
    GpuUsage,
    Job,
    Profile,
    VCCell,
    VirtualCluster,
    utcnow,
)
from hivebatch.db.session import (
    database_url,
    make_engine,
    make_sessionmaker,
    open_database,
    read_only_session,
)

__all__ = [
    "ACTIVE_STATES",
    "FINAL_STATES",
    "GPU_KINDS",
    "JOB_STATES",
    "WAITING_STATES",
    "Base",
    "CellSnapshot",
    "ControllerState",
    "Event",
    "GpuBinding",
    "GpuUsage",
    "Job",
    "Profile",
    "VCCell",
    "VirtualCluster",
    "database_url",
    "make_engine",
    "make_sessionmaker",
    "open_database",
    "read_only_session",
    "utcnow",
]
