"""Assertions shared by the normalization tests (tests/kernels/test_norms.py,
tests/kernels/test_batchnorm.py)."""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np


def mp(value: Any) -> mpmath.mpf:
    """A float16/32/64 value as an mpf, exactly."""
    return mpmath.mpf(float(value))


def assert_same_values(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values (NaN equals NaN; 0 equals -0), naming the first index that differs."""
    actual, expected = np.broadcast_arrays(np.asarray(actual), np.asarray(expected))
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    if not np.all(same):
        index = tuple(int(i) for i in np.argwhere(~same)[0])
        raise AssertionError(
            f"{what} at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
        )
