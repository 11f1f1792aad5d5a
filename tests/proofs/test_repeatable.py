"""Float results that the report prints: the same bits whichever kernels the BLAS picks."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from proofs.repeatable import frobenius, top_singular

ROOT = Path(__file__).resolve().parents[2]

#: Matrices of the sizes the searches and the report use, with entries over many binades.
matrices = st.tuples(st.integers(1, 12), st.integers(1, 12)).flatmap(
    lambda shape: arrays(
        np.float64, shape, elements=st.floats(-1e6, 1e6, allow_subnormal=False, width=64)
    )
)


@given(matrices)
def test_top_singular_is_the_largest_singular_triplet(a):
    s, u, v = top_singular(a)
    expected = np.linalg.svd(a, compute_uv=False)[0]
    assert s == pytest.approx(expected, rel=1e-13, abs=1e-300)
    if s > 0:
        assert np.linalg.norm(u) == pytest.approx(1.0, rel=1e-14)
        assert np.linalg.norm(v) == pytest.approx(1.0, rel=1e-14)
        assert np.linalg.norm(a @ v - s * u) <= 1e-12 * s
        assert np.linalg.norm(a.T @ u - s * v) <= 1e-12 * s


def test_top_singular_of_zero_and_of_ties():
    s, u, v = top_singular(np.zeros((3, 2)))
    assert s == 0.0 and np.linalg.norm(u) == 1.0 and np.linalg.norm(v) == 1.0
    s, u, v = top_singular(np.diag([2.0, -5.0, 5.0]))
    assert s == 5.0 and abs(u @ np.diag([2.0, -5.0, 5.0]) @ v) == 5.0
    with pytest.raises(ValueError, match="nonempty"):
        top_singular(np.zeros((0, 3)))


def test_frobenius_sums_in_index_order():
    x = np.array([[1e200, 1e200], [3.0, 4.0]])
    assert frobenius(x) == np.inf  # the squares overflow: no rescaling, by design
    assert frobenius(np.array([3.0, 4.0])) == 5.0
    assert frobenius(np.arange(6.0).reshape(2, 3)) == np.sqrt(55.0)


#: What the child prints: the float results the report takes from a witness and a search.
_PROGRAM = """
import json, numpy as np
from proofs import attention, spectral
W = spectral.dense_conv_matrix(np.ones((1, 1, 3, 3)), (4, 4), (1, 1), (1, 1), "zeros")
sigma = spectral.sigma_max(W)
adversarial = attention.standard_settings("scs_attention")[2]
found = attention.max_jacobian_norm(
    "scs_attention", adversarial.params, 2, starts=2, steps=25, hp=False
)
print(json.dumps([str(sigma.witness_lo), found.norm.hex(), found.X.tobytes().hex()]))
"""


def _run(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout)


def _has_avx2_fma() -> bool:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    flags = Path("/proc/cpuinfo").read_text().split()
    return "avx2" in flags and "fma" in flags


@pytest.mark.skipif(not _has_avx2_fma(), reason="needs Linux on x86-64 with AVX2 and FMA")
def test_witness_and_search_do_not_depend_on_the_blas_kernels():
    """OpenBLAS picks its kernels for the CPU at load time; OPENBLAS_CORETYPE forces its
    Haswell kernels, which add in another order than its SkylakeX ones (the default on an
    AVX-512 machine, where this test has its power). With LAPACK's singular vector used
    unrounded, the conv2d witness's 40-digit bound differed between the two."""
    assert _run({"OPENBLAS_CORETYPE": "Haswell"}) == _run({})
