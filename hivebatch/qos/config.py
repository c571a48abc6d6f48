"""The ``qos:`` section of etc/hivebatch.yaml: class coefficients, θ, start-up overhead, profile store,
and how many GPUs the qos policy keeps free for arrivals."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hivebatch.errors import ConfigError
from hivebatch.qos.placement import ClassCoefficients


@dataclass(frozen=True)
class QosSettings:
    classes: ClassCoefficients = field(default_factory=ClassCoefficients)
    theta: float = 0.5
    startup_overhead_s: float = 30.0
    profiles: Path | None = None  # local profile store; None = shipped defaults only
    keep_free_gpus: int | None = None  # per VC, for arrivals; None = one node's GPUs (hivebatch.qos.busy)


def _number(section: dict[str, Any], key: str, default: float) -> float:
    value = section.get(key, default)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"qos.{key}: must be a number >= 0 (got {value!r})") from None
    if x < 0 or not math.isfinite(x):
        raise ConfigError(f"qos.{key}: must be a number >= 0 (got {value!r})")
    return x


def _keep_free(section: dict[str, Any]) -> int | None:
    value = section.get("keep_free_gpus", "node")
    if value == "node":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"qos.keep_free_gpus: must be a whole number of GPUs >= 0, or node (got {value!r})")
    return value


def parse_qos_config(data: dict[str, Any], config_dir: Path | None = None) -> QosSettings:
    """Parse ``data["qos"]`` (the whole config mapping); a relative profiles path is relative to the config file."""
    section = data.get("qos") or {}
    if not isinstance(section, dict):
        raise ConfigError(
            "qos: must be a mapping (classes:, theta:, startup_overhead_s:, profiles:, keep_free_gpus:)"
        )
    unknown = set(section) - {"classes", "theta", "startup_overhead_s", "profiles", "keep_free_gpus"}
    if unknown:
        raise ConfigError(
            f"qos: unknown key {sorted(unknown)[0]!r} "
            "(use classes, theta, startup_overhead_s, profiles, keep_free_gpus)"
        )
    classes = section.get("classes")
    if classes is not None and not isinstance(classes, dict):
        raise ConfigError("qos.classes: must be a mapping like {urgent: 0, prior: 1, normal: 2}")
    profiles = section.get("profiles")
    path: Path | None = None
    if profiles:
        path = Path(str(profiles))
        if not path.is_absolute() and config_dir is not None:
            path = config_dir / path
    return QosSettings(
        classes=ClassCoefficients.from_mapping(classes),
        theta=_number(section, "theta", 0.5),
        startup_overhead_s=_number(section, "startup_overhead_s", 30.0),
        profiles=path,
        keep_free_gpus=_keep_free(section),
    )
