"""Finding and reading etc/hivebatch.yaml.

Each section is parsed by the module that owns it (``cluster``/``virtual_clusters`` by
``hivebatch.cells.config``, ``qos`` by ``hivebatch.qos``, ``database`` by ``hivebatch.db``);
this module only locates the file and returns its raw mapping.
"""

from __future__ import annotations

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


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML mapping, turning every I/O or syntax problem into one ConfigError line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
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
    return data


def load_config(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, dict[str, Any]]:
    path = find_config_path(explicit)
    return path, read_yaml(path)
