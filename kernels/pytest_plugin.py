"""The pytest plugin of ``kernels.testing`` (entry point ``liptable`` in ``pytest11``):
fixtures for tests of hand-written kernels.

- ``liptable_reference``: :func:`kernels.testing.assert_matches_reference`;
- ``liptable_hard_inputs``: :func:`kernels.testing.hard_inputs`;
- ``liptable_hard_strategy``: :func:`kernels.testing.hard_input_strategy`.

::

    def test_my_rmsnorm(liptable_reference, liptable_hard_inputs):
        for x in liptable_hard_inputs("rmsnorm", ml_dtypes.bfloat16).values():
            liptable_reference(my_rmsnorm, "rmsnorm", x, gamma, eps=1e-6, vjp=my_rmsnorm_vjp)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernels.testing import assert_matches_reference, hard_input_strategy, hard_inputs


@pytest.fixture
def liptable_reference() -> Callable[..., Any]:
    """Assert that an implementation matches liptable's reference within a budget."""
    return assert_matches_reference


@pytest.fixture
def liptable_hard_inputs() -> Callable[..., Any]:
    """Inputs that break naive implementations of a module, by name."""
    return hard_inputs


@pytest.fixture
def liptable_hard_strategy() -> Callable[..., Any]:
    """A hypothesis strategy over those inputs."""
    return hard_input_strategy
