"""GPU-hours per GPU: what guaranteed and what opportunistic work got, and what co-location added.

A whole GPU held for an hour is 1 GPU-hour; a slice counts its share of the GPU's memory (8G of a 32G
GPU for an hour = 0.25 GPU-hour). Co-located GPU-hours are opportunistic work done on GPUs that
guaranteed work held at the same time: capacity the cluster would otherwise not have delivered, the
figure AntMan reports as "extra GPUs for jobs".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuUse:
    """One job's use of one GPU over [start, end) seconds."""

    job_id: str
    vc: str
    node: str
    gpu: int
    share: float  # 1.0 for a whole GPU, the memory fraction for a slice
    start: float
    end: float
    opportunistic: bool = False
    colocated: bool = False


@dataclass
class GpuHours:
    guaranteed: float = 0.0
    opportunistic: float = 0.0
    colocated: float = 0.0

    @property
    def total(self) -> float:
        return self.guaranteed + self.opportunistic


@dataclass
class SharingAccount:
    window_h: float
    capacity_gpu_h: float
    total: GpuHours = field(default_factory=GpuHours)
    per_gpu: dict[tuple[str, int], GpuHours] = field(default_factory=dict)
    per_vc: dict[str, GpuHours] = field(default_factory=dict)

    @property
    def extra_capacity_pct(self) -> float:
        """Co-located opportunistic GPU-hours per 100 guaranteed GPU-hours."""
        return 100.0 * self.total.colocated / self.total.guaranteed if self.total.guaranteed else 0.0

    @property
    def utilization_pct(self) -> float:
        return 100.0 * self.total.total / self.capacity_gpu_h if self.capacity_gpu_h else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "window_h": round(self.window_h, 3),
            "capacity_gpu_h": round(self.capacity_gpu_h, 3),
            "guaranteed_gpu_h": round(self.total.guaranteed, 3),
            "opportunistic_gpu_h": round(self.total.opportunistic, 3),
            "colocated_gpu_h": round(self.total.colocated, 3),
            "utilization_pct": round(self.utilization_pct, 2),
            "extra_capacity_pct": round(self.extra_capacity_pct, 2),
        }


def account(uses: Iterable[GpuUse], start: float, end: float, cluster_gpus: int) -> SharingAccount:
    """Sum GPU-hours of ``uses`` clipped to the window [start, end)."""
    if end < start:
        raise ValueError("the window ends before it starts")
    window_h = (end - start) / 3600.0
    acc = SharingAccount(window_h=window_h, capacity_gpu_h=window_h * cluster_gpus)
    for u in uses:
        lo, hi = max(u.start, start), min(u.end, end)
        if hi <= lo:
            continue
        h = (hi - lo) / 3600.0 * u.share
        for bucket in (
            acc.total,
            acc.per_gpu.setdefault((u.node, u.gpu), GpuHours()),
            acc.per_vc.setdefault(u.vc, GpuHours()),
        ):
            if u.opportunistic:
                bucket.opportunistic += h
                if u.colocated:
                    bucket.colocated += h
            else:
                bucket.guaranteed += h
    return acc
