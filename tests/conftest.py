"""Test configuration: hypothesis profiles and a guard on mpmath's global precision.

Profiles: ``default`` (fast, random, for development) and ``ci`` (more examples,
derandomized so that a CI run is reproducible), chosen with ``HYPOTHESIS_PROFILE=ci``;
``.ci/run`` uses ``ci``.
"""

from __future__ import annotations

import os

import mpmath
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
#: CI draws twice the default's examples (derandomized, so every run checks the same ones);
#: 200 took the fresh-clone suite to 14 min 20 s on 2 cores, too close to its 15-minute limit.
settings.register_profile(
    "ci",
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _mpmath_precision_is_untouched():
    """Every test must leave mpmath's global precision as it found it (workdps only)."""
    before = mpmath.mp.prec
    yield
    after = mpmath.mp.prec
    mpmath.mp.prec = before
    assert after == before, f"mpmath.mp.prec changed from {before} to {after}: use workdps"
