"""Bit-for-bit comparison of arrays, shared by the kernel tests (tests/kernels/test_f16.py,
tests/kernels/test_norms.py, tests/kernels/test_batchnorm.py)."""

from __future__ import annotations

import numpy as np

#: How many differing elements a failure lists (the count of all of them is given too).
MISMATCHES_SHOWN = 10


def _bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns of ``values`` as unsigned integers of the same width."""
    values = np.asarray(values)
    return values.copy(order="C").view(np.dtype(f"u{values.dtype.itemsize}"))


def _hex(value: int, itemsize: int) -> str:
    return f"0x{int(value):0{2 * itemsize}x}"


def assert_same_bits(
    what: str,
    actual: np.ndarray,
    expected: np.ndarray,
    inputs: np.ndarray | None = None,
) -> None:
    """Identical shape, dtype and bits (so also NaN payloads and signed zeros).

    A failure names how many elements differ and, for the first :data:`MISMATCHES_SHOWN`,
    the index, the actual and the expected value (each with its bits) and, when ``inputs``
    (of the same shape) is given, the input there.
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    actual_bits, expected_bits = _bits(actual), _bits(expected)
    bad = np.argwhere(actual_bits != expected_bits)
    if bad.size == 0:
        return
    size = actual.dtype.itemsize
    lines = [f"{what}: {len(bad)} of {actual.size} elements differ; the first ones:"]
    for row in bad[:MISMATCHES_SHOWN]:
        index = tuple(int(i) for i in row)
        where = f"  at index {index}"
        if inputs is not None:
            value = np.asarray(inputs)[index]
            where += f" (input {value!r}, {_hex(_bits(value)[()], value.itemsize)})"
        lines.append(
            f"{where}: got {actual[index]!r} ({_hex(actual_bits[index], size)}), "
            f"expected {expected[index]!r} ({_hex(expected_bits[index], size)})"
        )
    raise AssertionError("\n".join(lines))
