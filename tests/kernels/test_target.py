"""kernels/_target.py: 512-bit vectors on AVX-512 processors, with the bits of 256-bit ones.

The comparison runs the same kernels in a child process that keeps LLVM's 256-bit default
(``NUMBA_CPU_FEATURES`` set to the host's features, Numba's own default) and compares its
results with this process's, bit for bit: forward, derivative and VJP of GeLU at every
float16 input, and float32 Softmax, whose arithmetic has no reassociated sum. The other
activations, the poolings, the other dtypes and bfloat16, and strict mode run with
``-m slow``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from numba.core.codegen import get_host_cpu_features
from numba.core.registry import cpu_target

from derive.definitions.activations import ELEMENTWISE
from kernels import _target, avgpool, maxpool, softmax
from tests.helpers.assertions import assert_same_bits

ROOT = Path(__file__).resolve().parents[2]
HOST = get_host_cpu_features()
WIDE = _target.wide_vectors_apply(HOST, os.environ)

#: Compared by default (compiling each activation for 256 bits too costs 9-15 s of CPU): GeLU,
#: with the erfc table's gathers and the bounded exponential that Softmax shares.
DEFAULT_ACTIVATIONS = ("gelu_none",)


def _inputs(full: bool) -> dict[str, np.ndarray]:
    """Every float16 input; with ``full`` also every bfloat16 input and 2^20 float32 and
    2^18 float64 values (random bits: every exponent, NaN and inf; and N(0, 4^2))."""
    every = np.arange(1 << 16, dtype=np.uint16)
    inputs = {"float16": every.view(np.float16)}
    if full:
        rng = np.random.default_rng(2026)
        inputs["bfloat16"] = every.view(ml_dtypes.bfloat16)
        inputs["float32"] = np.concatenate(
            [
                rng.integers(0, 1 << 32, 1 << 19, dtype=np.uint64)
                .astype(np.uint32)
                .view(np.float32),
                (4 * rng.standard_normal(1 << 19)).astype(np.float32),
            ]
        )
        inputs["float64"] = np.concatenate(
            [rng.integers(0, 1 << 63, 1 << 17).view(np.float64), 8 * rng.standard_normal(1 << 17)]
        )
    return inputs


def outputs(full: bool) -> dict[str, np.ndarray]:
    """The results compared between the two widths, as raw bytes, by name."""
    rng = np.random.default_rng(25)
    results = {}
    with np.errstate(all="ignore"):
        for kind, x in _inputs(full).items():
            g = rng.standard_normal(x.size).astype(x.dtype)
            modes = (False, True) if full and x.dtype.itemsize == 2 else (False,)
            for module in ELEMENTWISE:
                if not (full or module.key in DEFAULT_ACTIVATIONS):
                    continue
                kernel = importlib.import_module(f"kernels.{module.name}")
                variant = (module.variant,) if module.variant else ()
                for strict in modes:
                    key = f"{module.key} {kind}{' strict' if strict else ''}"
                    results[f"{key} forward"] = kernel.forward(x, *variant, strict_fp16=strict)
                    results[f"{key} derivative"] = kernel.derivative(
                        x, *variant, strict_fp16=strict
                    )
                    results[f"{key} vjp"] = kernel.vjp(x, g, *variant, strict_fp16=strict)
        dtypes = (np.float16, np.float32, np.float64) if full else (np.float32,)
        for dtype in dtypes:
            kind = np.dtype(dtype).name
            rows = (3 * rng.standard_normal((64, 1024))).astype(dtype)
            rows[0, 5], rows[1, :] = -np.inf, 7.0  # a masked entry, a constant row
            g = rng.standard_normal(rows.shape).astype(dtype)
            results[f"softmax {kind} forward"] = softmax.forward(rows)
            results[f"softmax {kind} vjp"] = softmax.vjp(rows, g)
            if not full:
                continue
            planes = rng.standard_normal((2, 8, 30, 30)).astype(dtype)
            for module in (maxpool, avgpool):
                for window in (2, 3):
                    y = module.forward2d(planes, window)
                    key = f"{module.__name__} {kind} {window}x{window}"
                    results[f"{key} forward"] = y
                    results[f"{key} vjp"] = module.vjp2d(planes, np.ones_like(y), window)
    return {key: np.ascontiguousarray(value).view(np.uint8) for key, value in results.items()}


def _narrow_outputs(tmp_path: Path, full: bool) -> dict[str, np.ndarray]:
    """:func:`outputs` of a child process compiled for LLVM's 256-bit default."""
    path = tmp_path / "narrow.npz"
    script = (
        "import sys, numpy as np; from tests.kernels.test_target import outputs; "
        "np.savez(sys.argv[1], **outputs(sys.argv[2] == 'full'))"
    )
    environ = {**os.environ, "NUMBA_CPU_FEATURES": HOST}
    subprocess.run(
        [sys.executable, "-c", script, str(path), "full" if full else "default"],
        cwd=ROOT,
        env=environ,
        check=True,
        timeout=1800,
    )
    with np.load(path) as narrow:
        return {key: narrow[key] for key in narrow.files}


def _assert_same_results(tmp_path: Path, full: bool) -> None:
    narrow, wide = _narrow_outputs(tmp_path, full), outputs(full)
    assert narrow.keys() == wide.keys()
    for key, value in wide.items():
        assert_same_bits(f"{key}: 512-bit against 256-bit vectors", value, narrow[key])


def test_the_code_generator_has_the_chosen_features():
    """On an AVX-512 host (no NUMBA_CPU_* set) Numba compiles with ``-prefer-256-bit``;
    elsewhere with Numba's own choice. Once Numba's code generator exists, asking again
    changes nothing."""
    features = cpu_target.target_context.codegen().magic_tuple()[2]
    if WIDE:
        assert features == f"{HOST},-{_target.NARROW}"
    else:
        assert f"-{_target.NARROW}" not in features.split(",")
    assert _target.prefer_wide_vectors() is False
    assert cpu_target.target_context.codegen().magic_tuple()[2] == features


def test_the_environment_decides():
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        assert not _target.wide_vectors_apply("+avx512f", {name: ""})
    assert _target.wide_vectors_apply("+sse2,+avx512f,+avx512vl", {"HOME": "/"})
    assert not _target.wide_vectors_apply("+sse2,-avx512f,+avx512vl", {})
    assert not _target.wide_vectors_apply("+sse2,+avx512fp16", {})


@pytest.mark.skipif(not WIDE, reason="no AVX-512 here (or NUMBA_CPU_* set): one width only")
def test_512_bit_vectors_give_the_bits_of_256_bit_ones(tmp_path):
    _assert_same_results(tmp_path, full=False)


@pytest.mark.slow
@pytest.mark.skipif(not WIDE, reason="no AVX-512 here (or NUMBA_CPU_* set): one width only")
def test_512_bit_vectors_give_the_bits_of_256_bit_ones_everywhere(tmp_path):
    _assert_same_results(tmp_path, full=True)
