"""The hivebatch request a job carries from ``hsub`` to the controller, inside its Slurm comment.

hsub submits the job held and without GPUs; Slurm keeps the comment with the job (and in accounting,
with ``AccountingStoreFlags=job_comment``), so the controller needs no side channel and a lost DB can
be rebuilt from Slurm alone.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from hivebatch.errors import HivebatchError

PREFIX = "hivebatch:v1:"
CLASSES = ("urgent", "prior", "normal", "opportunistic")
_SAFE = re.compile(r"^[A-Za-z0-9._+-]{1,64}$")


@dataclass(frozen=True)
class JobRequest:
    vc: str
    qos: str = "normal"
    gpus: int = 1
    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    within: str | None = None
    model: str | None = None
    like: str | None = None
    batch_size: int | None = None
    iters: int | None = None
    time_limit_s: int | None = None
    gpu_mem_mib: int | None = None

    @property
    def priority(self) -> int:
        """Cell-core priority: opportunistic work is -1, guaranteed classes rank urgent > prior > normal."""
        return {"opportunistic": -1, "normal": 0, "prior": 1, "urgent": 2}[self.qos]

    def validate(self) -> None:
        if self.qos not in CLASSES:
            raise HivebatchError(f"unknown class {self.qos!r}: use one of {', '.join(CLASSES)}")
        for name in ("vc", "gpu_type", "within", "model", "like"):
            value = getattr(self, name)
            if value is not None and not _SAFE.match(value):
                raise HivebatchError(
                    f"{name.replace('_', '-')} {value!r} may only contain letters, digits and . _ + - (at most 64)"
                )
        for name in ("gpus", "nodes", "gpus_per_node", "batch_size", "iters", "time_limit_s", "gpu_mem_mib"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < (0 if name == "gpus" else 1)):
                raise HivebatchError(
                    f"{name.replace('_', '-')} must be a positive whole number, got {value!r}"
                )
        if self.nodes and self.gpus_per_node and self.gpus != self.nodes * self.gpus_per_node:
            raise HivebatchError(
                f"--gpus {self.gpus} does not equal --nodes {self.nodes} × --gpus-per-node {self.gpus_per_node}"
            )

    def to_comment(self) -> str:
        self.validate()
        payload = {k: v for k, v in asdict(self).items() if v is not None}
        return PREFIX + json.dumps(payload, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_comment(cls, comment: str | None) -> JobRequest | None:
        """The request in a Slurm comment, or None when the job was not submitted through hsub."""
        if not comment or not comment.startswith(PREFIX):
            return None
        try:
            raw: Any = json.loads(comment[len(PREFIX) :])
        except json.JSONDecodeError:
            return None
        if not isinstance(raw, dict):
            return None
        known = {f.name for f in fields(cls)}
        try:
            req = cls(**{k: v for k, v in raw.items() if k in known})
            req.validate()
        except (TypeError, HivebatchError):
            return None
        return req
