"""The ``sharing:`` section of etc/hivebatch.yaml.

```yaml
sharing:
  enabled: true                 # accept --gpu-mem jobs (fractional GPUs); default true
  allow_mixed_nodes: [node4]    # on these nodes a whole-GPU job that declared --gpu-mem leaves the
                                # rest of each of its GPUs to slices of its own VC
  colocate:                     # opportunistic slices on the idle part of guaranteed GPUs (AntMan)
    vcs: [sys]                  # ... of GPUs held by these VCs' guaranteed jobs
    nodes: [node3]              # ... of GPUs on these nodes, whoever holds them
    headroom_mib: 2048          # kept free above the guaranteed use (room for its memory bursts)
    max_jobs_per_gpu: 4         # opportunistic slices per GPU at most
```
GPU memory per GPU type comes from the leaf cell type's ``memory:`` (e.g. ``V100: {memory: 32G}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hivebatch.errors import ConfigError
from hivebatch.sharing.memory import parse_mem_mib

_TOP_KEYS = {"enabled", "allow_mixed_nodes", "colocate"}
_COLOCATE_KEYS = {"vcs", "nodes", "headroom_mib", "max_jobs_per_gpu"}


@dataclass(frozen=True)
class ColocateConfig:
    vcs: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    headroom_mib: int = 2048
    max_jobs_per_gpu: int = 4

    def allowed(self, vc: str | None, node: str) -> bool:
        """Whether opportunistic slices may use the idle part of a GPU of ``node`` held by ``vc``."""
        return node in self.nodes or (vc is not None and vc in self.vcs)

    @property
    def enabled(self) -> bool:
        return bool(self.vcs or self.nodes)


@dataclass(frozen=True)
class SharingConfig:
    enabled: bool = True
    allow_mixed_nodes: frozenset[str] = frozenset()
    colocate: ColocateConfig = field(default_factory=ColocateConfig)

    def mixed(self, node: str) -> bool:
        return node in self.allow_mixed_nodes


def _names(value: Any, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"sharing: {where} must be a list of names, like [node3, node4]")
    return frozenset(value)


def parse_sharing_config(
    data: Mapping[str, Any],
    known_nodes: set[str] | None = None,
    known_vcs: set[str] | None = None,
) -> SharingConfig:
    """Read ``data["sharing"]`` (absent = defaults); unknown keys, nodes or VCs are refused."""
    raw = data.get("sharing")
    if raw is None:
        return SharingConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError("sharing: must be a mapping (enabled:, allow_mixed_nodes:, colocate:)")
    extra = set(raw) - _TOP_KEYS
    if extra:
        raise ConfigError(
            f"sharing: unknown key {sorted(extra)[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})"
        )
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("sharing: enabled must be true or false")
    mixed = _names(raw.get("allow_mixed_nodes"), "allow_mixed_nodes")
    col_raw = raw.get("colocate") or {}
    if not isinstance(col_raw, Mapping):
        raise ConfigError(
            "sharing: colocate must be a mapping (vcs:, nodes:, headroom_mib:, max_jobs_per_gpu:)"
        )
    extra = set(col_raw) - _COLOCATE_KEYS
    if extra:
        raise ConfigError(
            f"sharing: colocate: unknown key {sorted(extra)[0]!r} (known: {', '.join(sorted(_COLOCATE_KEYS))})"
        )
    headroom_raw = col_raw.get("headroom_mib", 2048)
    try:
        headroom = (
            0 if headroom_raw in (0, "0") else parse_mem_mib(headroom_raw, "sharing: colocate: headroom_mib")
        )
    except Exception as exc:  # HivebatchError from the size parser: re-raise as a config problem
        raise ConfigError(str(exc)) from None
    max_jobs = col_raw.get("max_jobs_per_gpu", 4)
    if not isinstance(max_jobs, int) or isinstance(max_jobs, bool) or max_jobs < 1:
        raise ConfigError("sharing: colocate: max_jobs_per_gpu must be a whole number of at least 1")
    colocate = ColocateConfig(
        vcs=_names(col_raw.get("vcs"), "colocate: vcs"),
        nodes=_names(col_raw.get("nodes"), "colocate: nodes"),
        headroom_mib=headroom,
        max_jobs_per_gpu=max_jobs,
    )
    if known_nodes is not None:
        for where, names in (("allow_mixed_nodes", mixed), ("colocate: nodes", colocate.nodes)):
            unknown = sorted(names - known_nodes)
            if unknown:
                raise ConfigError(f"sharing: {where} names unknown node {unknown[0]!r}")
    if known_vcs is not None:
        unknown = sorted(colocate.vcs - known_vcs)
        if unknown:
            raise ConfigError(f"sharing: colocate: vcs names unknown virtual cluster {unknown[0]!r}")
    return SharingConfig(enabled=enabled, allow_mixed_nodes=mixed, colocate=colocate)
