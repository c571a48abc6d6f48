"""Profile store: coefficients per (model type, GPU type), with fallback to the most similar model.

The shipped defaults live in ``hivebatch/data/profiles.json``. A local store file (``--profiles
FILE`` or ``qos.profiles`` in the config) holds profiles fitted on site; loading it overlays the
defaults, and saving writes only the local entries, so shipped numbers are never copied around.

An unknown model borrows the profile of the closest known one, and says so: first a user hint
(``like``), then the same model measured on another GPU type, then the declared family with the
nearest parameter count.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from hivebatch.errors import HivebatchError
from hivebatch.qos.perfmodel import Profile

SHIPPED_PATH = Path(__file__).resolve().parent.parent / "data" / "profiles.json"
STORE_VERSION = 1


class UnknownModelError(HivebatchError):
    """No profile for the model and nothing similar enough to borrow."""


def _norm(name: str) -> str:
    return name.strip().lower()


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise HivebatchError(f"cannot read profile store {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise HivebatchError(
            f"profile store {path} is not valid JSON (line {exc.lineno}): {exc.msg}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), list):
        raise HivebatchError(f"profile store {path}: expected an object with a 'profiles' list")
    return data


class ProfileStore:
    def __init__(self, shipped: list[Profile], local: list[Profile], path: Path | None, meta: dict[str, Any]):
        self._shipped = {(_norm(p.name), p.gpu_type): p for p in shipped}
        self._local = {(_norm(p.name), p.gpu_type): p for p in local}
        self.path = path
        self.meta = meta

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, include_shipped: bool = True) -> ProfileStore:
        """Shipped defaults, overlaid by the store at ``path`` if given (a missing file is an empty store)."""
        shipped: list[Profile] = []
        meta: dict[str, Any] = {}
        if include_shipped:
            data = _read(SHIPPED_PATH)
            meta = {k: v for k, v in data.items() if k != "profiles"}
            shipped = [Profile.from_dict(d) for d in data["profiles"]]
        local: list[Profile] = []
        p = Path(path) if path is not None else None
        if p is not None and p.exists():
            local = [Profile.from_dict(d) for d in _read(p)["profiles"]]
        return cls(shipped, local, p, meta)

    def profiles(self) -> list[Profile]:
        merged = dict(self._shipped)
        merged.update(self._local)
        return [merged[k] for k in sorted(merged)]

    def is_local(self, profile: Profile) -> bool:
        return self._local.get((_norm(profile.name), profile.gpu_type)) is profile

    def gpu_types(self) -> list[str]:
        return sorted({p.gpu_type for p in self.profiles()})

    def put(self, profile: Profile) -> None:
        self._local[(_norm(profile.name), profile.gpu_type)] = profile

    def save(self) -> Path:
        """Write the local entries atomically (temp file + rename)."""
        if self.path is None:
            raise HivebatchError("no profile store file to save to: pass --profiles FILE")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"version": STORE_VERSION, "profiles": [self._local[k].to_dict() for k in sorted(self._local)]}
        fd, tmp = tempfile.mkstemp(prefix=".profiles-", dir=str(self.path.parent))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(body, fh, indent=1, sort_keys=False)
                fh.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.path

    def _find(self, name: str, gpu_type: str | None) -> Profile | None:
        key = _norm(name)
        candidates = [p for p in self.profiles() if _norm(p.name) == key]
        if gpu_type is not None:
            candidates = [p for p in candidates if p.gpu_type == gpu_type]
        # measured before derived, then a stable order
        candidates.sort(key=lambda p: (-p.samples, p.gpu_type))
        return candidates[0] if candidates else None

    def get(
        self,
        name: str,
        gpu_type: str | None = None,
        like: str | None = None,
        family: str | None = None,
        params_m: float | None = None,
    ) -> tuple[Profile, str | None]:
        """(profile, note): note is None on an exact hit, else says which profile stands in and why."""
        where = f" on {gpu_type}" if gpu_type else ""
        exact = self._find(name, gpu_type)
        if exact is not None:
            return exact, None
        if like:
            hint = self._find(like, gpu_type) or self._find(like, None)
            if hint is None:
                raise UnknownModelError(f"--like {like}: no such profile (see `hivebatch model list`)")
            return hint, f"no profile for {name}{where}; using {hint.name}/{hint.gpu_type} (--like)"
        other = self._find(name, None)
        if other is not None:
            return (
                other,
                f"no profile for {name}{where}; using {other.name}/{other.gpu_type} (same model, other GPU)",
            )
        if family:
            pool = [p for p in self.profiles() if p.family and _norm(p.family) == _norm(family)]
            same_gpu = [p for p in pool if gpu_type is None or p.gpu_type == gpu_type]
            pool = same_gpu or pool
            if pool:
                if params_m and params_m > 0:
                    best = min(
                        pool, key=lambda p: (abs(math.log((p.params_m or params_m) / params_m)), p.name)
                    )
                else:
                    best = sorted(pool, key=lambda p: p.name)[0]
                return (
                    best,
                    f"no profile for {name}{where}; using {best.name}/{best.gpu_type} (same family {family})",
                )
        known = ", ".join(sorted({p.name for p in self.profiles()}))
        raise UnknownModelError(
            f"no profile for model {name}{where}: profile it (hadmin profile run), or name a similar "
            f"model with --like (known: {known})"
        )
