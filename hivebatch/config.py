"""Finding and reading the hivebatch config (/etc/hivebatch/hivebatch.yaml on a site).

Each section is parsed by the module that owns it (``cluster``/``virtual_clusters`` by
``hivebatch.cells.config``, ``qos`` by ``hivebatch.qos``, ``database`` by ``hivebatch.db``); this
module locates the file, refuses duplicate keys, unknown sections and unknown keys with their line
(every command loads the config through here, so a typo never passes silently) and returns the mapping.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import yaml

from hivebatch.errors import ConfigError

ENV_VAR = "HIVEBATCH_CONFIG"
SEARCH_PATH = (Path("/etc/hivebatch/hivebatch.yaml"), Path("etc/hivebatch.yaml"))


def find_config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The config named explicitly, else $HIVEBATCH_CONFIG, else the first file of SEARCH_PATH."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    for candidate in SEARCH_PATH:
        if candidate.exists():
            return candidate
    raise ConfigError(
        f"no configuration found: pass --config FILE or set {ENV_VAR} "
        f"(looked in {', '.join(str(p) for p in SEARCH_PATH)})"
    )


class Lined(dict[Any, Any]):
    """A YAML mapping that remembers the line of each key (1-based), for messages."""

    lines: dict[Any, int]


class _Lines:
    """A SafeLoader that refuses a key given twice in one mapping and records the line of every key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        out = Lined()
        out.lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call,unused-ignore]
            line = key_node.start_mark.line + 1
            if key in out.lines:
                raise ConfigError(
                    f"line {line}: duplicate key {key!r} (first given at line {out.lines[key]})"
                )
            out.lines[key] = line
            out[key] = self.construct_object(value_node, deep=deep)  # type: ignore[no-untyped-call,unused-ignore]
        return out


class _Loader(_Lines, yaml.SafeLoader):  # type: ignore[misc]
    pass


# libyaml's parser where PyYAML was built with it: every CLI and cycle reads the config, and the
# pure-Python parser took about four times as long on the lab's. Its syntax errors say less ("found
# character that cannot start any token", not which), so a file it refuses is read again by the other.
class _FastLoader(_Lines, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


for _loader in (_Loader, _FastLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _loader.construct_mapping)  # type: ignore[attr-defined,unused-ignore]
# a config read here can be written back (tests and tools dump it): as the plain mapping it is
yaml.SafeDumper.add_representer(Lined, yaml.SafeDumper.represent_dict)

_ANY = None  # a value the owning section's parser checks itself
# every section and key the config may hold; nested dicts are checked further down
SCHEMA: dict[str, Any] = {
    "cluster": {"cell_types": _ANY, "physical_cells": _ANY},
    "virtual_clusters": _ANY,
    "database": {"url": _ANY},
    "qos": {
        "classes": _ANY,
        "theta": _ANY,
        "startup_overhead_s": _ANY,
        "profiles": _ANY,
        "keep_free_gpus": _ANY,
    },
    "controller": {
        "lock_file": _ANY,
        "interval_s": _ANY,
        "policy": _ANY,
        "start_timeout_s": _ANY,
        "usage_file": _ANY,
        "refusals_file": _ANY,
        "backfill": _ANY,
        "starve_after_h": _ANY,
        "fairshare_half_life_h": _ANY,
        "untyped_gres": _ANY,
    },
    # request bounds (hivebatch.bounds, which names its own keys)
    "limits": _ANY,
    # per-user limits on the strict classes (hivebatch.userlimits checks classes, keys and VCs)
    "user_limits": _ANY,
    "preemption": {"notice_s": _ANY, "notice_s_by_class": _ANY},
    "sharing": {
        "enabled": _ANY,
        "allow_mixed_nodes": _ANY,
        "colocate": {"vcs": _ANY, "nodes": _ANY, "headroom_mib": _ANY, "max_jobs_per_gpu": _ANY},
    },
}


def schema_problems(data: dict[str, Any], schema: dict[str, Any] = SCHEMA, where: str = "") -> list[str]:
    """Unknown sections and keys, each with its line: ``line 12: sharing: unknown key 'enabeld' (known: …)``."""
    problems: list[str] = []
    lines = getattr(data, "lines", {})
    for key, value in data.items():
        at = f"line {lines[key]}: " if key in lines else ""
        if key not in schema:
            what = "section" if not where else "key"
            known = ", ".join(schema)
            problems.append(f"{at}{where}unknown {what} {key!r} (known: {known})")
        elif isinstance(schema[key], dict) and isinstance(value, dict):
            problems += schema_problems(value, schema[key], f"{where}{key}: ")
    return problems


def read_yaml(path: str | os.PathLike[str], check: bool = False) -> dict[str, Any]:
    """Parse a YAML mapping, turning every I/O or syntax problem into one ConfigError line; with
    ``check``, also refuse unknown sections and keys (duplicate keys are always refused)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        try:
            data = yaml.load(text, Loader=_FastLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError:
            data = yaml.load(text, Loader=_Loader)  # noqa: S506 - its words for the error
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{p}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: the top level must be a mapping of sections (cluster:, virtual_clusters:, ...)"
        )
    problems = schema_problems(data) if check else []
    if problems:
        raise ConfigError(f"{p}: " + "; ".join(problems))
    return data


def load_config(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, dict[str, Any]]:
    """The config every command reads: found, parsed and its sections and keys checked."""
    path = find_config_path(explicit)
    return path, read_yaml(path, check=True)


# controller.interval_s: how often the controller runs its cycle
DEFAULT_INTERVAL_S = 60.0
# a placed job Slurm has not started by then is taken back and placed again (controller.start_timeout_s)
DEFAULT_START_TIMEOUT_S = 300.0


def controller_seconds(section: dict[str, Any], key: str, default: float) -> float:
    """``controller.KEY`` of the config's controller section: a number of seconds over 0."""
    try:
        value = float(section.get(key, default))
    except (TypeError, ValueError):
        raise ConfigError(f"controller.{key} must be a number of seconds, e.g. {default:.0f}") from None
    if not math.isfinite(value) or value <= 0:
        # YAML reads .nan and .inf as floats: a NaN interval or timeout would pass a plain bound
        raise ConfigError(
            f"controller.{key} must be more than 0 seconds (a finite number), e.g. {default:.0f}"
        )
    return value
