"""What one controller process reads once from the config: topology, QoS platform, policy, settings."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hivebatch.bounds import DEFAULT_LIMITS, Limits, parse_limits
from hivebatch.config import DEFAULT_INTERVAL_S, DEFAULT_START_TIMEOUT_S, controller_seconds
from hivebatch.errors import ConfigError
from hivebatch.notice import NoticeSettings, parse_notice
from hivebatch.userlimits import UserLimits, parse_user_limits

if TYPE_CHECKING:
    from hivebatch.cells import ClusterSpec
    from hivebatch.qos import Platform, Policy, ProfileStore, QosSettings

# slurmctld's main and backfill passes start a released job within a minute on a busy cluster
DEFAULT_STARVE_AFTER_H = 12.0
DEFAULT_FAIRSHARE_HALF_LIFE_H = 7 * 24.0


@dataclass(frozen=True)
class ControllerSettings:
    interval_s: float
    policy: str
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S  # a placed job not started by then is taken back
    backfill: bool = True  # each VC's waiting head gets a reservation (hivebatch.reservation)
    starve_after_s: float = DEFAULT_STARVE_AFTER_H * 3600.0  # a task waiting this long becomes the head
    fairshare_half_life_s: float | None = DEFAULT_FAIRSHARE_HALF_LIFE_H * 3600.0  # None: no fairshare
    # pin as a plain GPU count where Slurm has no choice, so a requeued job may resume on any GPUs
    untyped_gres: bool = True


def _hours(section: dict[str, Any], key: str, default: float, example: str) -> float:
    """``controller.<key>`` in hours (>= 0), as seconds."""
    value = section.get(key, default)
    try:
        hours = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"controller.{key} must be a number of hours, e.g. {example}") from None
    if not 0 <= hours < 1e6:
        raise ConfigError(f"controller.{key} must be between 0 and 1000000 hours, e.g. {example}")
    return hours * 3600.0


@dataclass
class ControllerContext:
    config_path: Path | None
    data: dict[str, Any]
    spec: ClusterSpec
    platform: Platform
    policy: Policy
    profiles: ProfileStore | None
    settings: ControllerSettings
    limits: Limits = DEFAULT_LIMITS
    user_limits: UserLimits = field(default_factory=UserLimits)
    #: the job_submit plugin's usage file, written each cycle while user_limits has any
    usage_path: Path | None = None
    #: the job_submit plugin's node sizes file, written each cycle by the controller serving slurmctld
    nodes_path: Path | None = None
    #: where the job_submit plugin notes the owner updates it refused, read each cycle by the same controller
    refusals_path: Path | None = None
    notice: NoticeSettings = field(default_factory=NoticeSettings)

    @functools.cached_property
    def plugin_site(self) -> dict[str, Any]:
        """The job_submit plugin's checks as this config has them, for the node sizes file
        (``jobsubmit.followed_table``): worked out once per config read."""
        from hivebatch.jobsubmit import followed_table

        return followed_table(self.data)


def parse_settings(config_path: Path | None, data: dict[str, Any]) -> ControllerSettings:
    section = data.get("controller") or {}
    if not isinstance(section, dict):
        raise ConfigError("controller: must be a mapping, e.g. {interval_s: 60, policy: qos}")
    # an older config's lock_file is ignored: one controller per database is the lease's job (lease.py)
    backfill = section.get("backfill", True)
    if not isinstance(backfill, bool):
        raise ConfigError("controller.backfill must be true or false")
    untyped = section.get("untyped_gres", True)
    if not isinstance(untyped, bool):
        raise ConfigError("controller.untyped_gres must be true or false")
    half_life = _hours(
        section, "fairshare_half_life_h", DEFAULT_FAIRSHARE_HALF_LIFE_H, "168 (0 turns fairshare off)"
    )
    return ControllerSettings(
        interval_s=controller_seconds(section, "interval_s", DEFAULT_INTERVAL_S),
        policy=str(section.get("policy", "qos")),
        start_timeout_s=controller_seconds(section, "start_timeout_s", DEFAULT_START_TIMEOUT_S),
        backfill=backfill,
        starve_after_s=_hours(section, "starve_after_h", DEFAULT_STARVE_AFTER_H, "12"),
        fairshare_half_life_s=half_life or None,
        untyped_gres=untyped,
    )


def build_platform(spec: ClusterSpec, qos_settings: QosSettings) -> Platform:
    """The QoS model's view of the cluster. The user's GPU count is respected (their script expects it);
    the model chooses how to arrange those GPUs over nodes."""
    from hivebatch import qos

    gpn = max((len(n.gpu_indices) for n in spec.nodes), default=1)
    return qos.Platform(
        max_nodes=len(spec.nodes),
        gpus_per_node=gpn,
        theta=qos_settings.theta,
        overhead_s=qos_settings.startup_overhead_s,
        classes=qos_settings.classes,
        respect_user_gpus=True,
        keep_free_gpus=qos_settings.keep_free_gpus,
    )


def load_context(config: str | os.PathLike[str] | None = None, *, publish: bool = False) -> ControllerContext:
    """The controller's whole setting from a config file. ``publish``: the controller that serves
    slurmctld writes the node sizes file its plugin reads (tests and benches leave slurmctld's
    directory alone)."""
    from hivebatch import qos
    from hivebatch.cells import parse_cluster_config
    from hivebatch.config import load_config

    path, data = load_config(config)
    spec = parse_cluster_config(data)
    from hivebatch.sharing.integration import load_sharing

    load_sharing(data, spec)  # a bad sharing: section stops the controller at start, in one line
    qos_settings = qos.parse_qos_config(data, path.resolve().parent)
    settings = parse_settings(path, data)
    if settings.policy not in qos.POLICY_NAMES:
        raise ConfigError(
            f"controller.policy {settings.policy!r} is unknown: use one of {', '.join(qos.POLICY_NAMES)}"
        )
    profiles = qos.ProfileStore.load(qos_settings.profiles)
    from hivebatch.jobsubmit import nodes_file, refusals_file, usage_file

    user_limits = parse_user_limits(data, spec.vcs)
    return ControllerContext(
        config_path=path,
        data=data,
        spec=spec,
        platform=build_platform(spec, qos_settings),
        policy=qos.get_policy(settings.policy),
        profiles=profiles,
        settings=settings,
        limits=parse_limits(data),
        user_limits=user_limits,
        usage_path=None if user_limits.empty else usage_file(data),
        nodes_path=nodes_file(data) if publish else None,
        refusals_path=refusals_file(data) if publish else None,
        notice=parse_notice(data),
    )
