"""Test configuration: hypothesis profiles, a guard on mpmath's global precision, and the
order in which xdist hands out the test files (the longest first).

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


#: Test files whose module fixtures take the longest (a fresh-clone run with --durations:
#: the report build, the BatchNorm and attention claim checks, the first compilation of
#: every kernel in every dtype, the windowed pooling references). Under ``--dist loadfile``
#: xdist hands out whole files in collection order; starting with these keeps one worker
#: from still running a long file while the other has nothing left to do.
LONGEST_FIRST = (
    "tests/report/test_document.py",
    "tests/check/test_batchnorm.py",
    "tests/check/test_attention.py",
    "tests/kernels/test_contract.py",
    "tests/kernels/test_pooling.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the files of :data:`LONGEST_FIRST` first, in that order; the rest keep theirs."""
    root = config.rootpath

    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)
