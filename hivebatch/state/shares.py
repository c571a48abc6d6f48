"""What one job counts for on its GPUs, and the controller's stored state, as readers need them.

The reports read these through here rather than from the controller, so they depend on the stored
state only, never on how the controller writes it.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from hivebatch.db.models import ControllerState, Job


def gpu_capacity_by_node(spec: Any) -> dict[str, int]:
    """Usable memory (MiB) of one GPU of each node whose GPU type has ``memory:`` configured."""
    from hivebatch.sharing.integration import gpu_capacity_mib

    out: dict[str, int] = {}
    for n in spec.nodes:
        cap = gpu_capacity_mib(spec, n.gpu_type)
        if cap:
            out[n.name] = int(cap)
    return out


def gpu_share(session: Session, job: Job) -> float:
    """The part of each of its GPUs a job counts for: 1 for whole GPUs, the memory share for a slice
    (``shard:gN:k`` of a GPU with C MiB: k GiB / C), from the capacities the cycle put in session.info.
    A whole-GPU job holding its GPUs as shards (to leave the rest to slices) still counts whole GPUs."""
    from hivebatch.sharing.integration import is_slice_row

    gres = str(job.gres or "")
    if not is_slice_row(job) or not job.placement:
        return 1.0
    from hivebatch.sharing.gres import parse_shard_gres
    from hivebatch.sharing.integration import slice_share
    from hivebatch.sharing.memory import SHARD_MIB

    caps = session.info.get("gpu_capacity_mib") or {}
    cap = caps.get(next(iter(job.placement)))
    shards = sum(parse_shard_gres(gres).values())
    return slice_share(shards * SHARD_MIB, int(cap)) if cap and shards else 1.0


def get_state(session: Session, key: str) -> Any:
    """A value the controller stored under ``key`` (None when it never did)."""
    row = session.get(ControllerState, key)
    if row is None or row.value is None:
        return None
    return json.loads(row.value)
