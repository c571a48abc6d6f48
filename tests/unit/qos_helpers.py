"""Shared builders for the QoS unit tests."""

from __future__ import annotations

import os
from pathlib import Path

from hivebatch.qos.perfmodel import DEFAULT_COEFFS, Profile

# The public profile measurements sit next to the project checkout (../shared/data/profiles);
# HIVEBATCH_PROFILE_DATA overrides.
PROFILE_DATA = Path(
    os.environ.get("HIVEBATCH_PROFILE_DATA")
    or Path(__file__).resolve().parents[3] / "shared" / "data" / "profiles"
)


def simple_profile(**coeffs: float) -> Profile:
    """Default-form profile: every coefficient zero unless given."""
    c = dict.fromkeys(DEFAULT_COEFFS, 0.0)
    c.update(coeffs)
    return Profile(name="toy", gpu_type="V100", form="default", coefficients=c, family="cnn", params_m=10.0)


def toy_profile() -> Profile:
    """T(w', s) = 0.01·w' + 0.1·[n>1] + 0.2·log2(d_node)  (seconds per iteration)."""
    return simple_profile(t_w=0.01, s_multi=0.1, s_lognode=0.2)
