"""kernels.testing: the harness catches the classic defects of hand-written kernels, each
with a witness from ``hard_inputs``, and passes the correct versions."""

from __future__ import annotations

import math
import re
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings

from kernels import sigmoid
from kernels.testing import (
    BOUND_ENTRIES,
    VacuousTestWarning,
    assert_matches_reference,
    compare,
    hard_input_strategy,
    hard_inputs,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def _nonfinite(report: str, name: str) -> int:
    """The NaN/inf mismatch count of output ``name`` in a report's table."""
    match = re.search(rf"^  {name}\s+\S+\s+\S+\s+\S+\s+(\d+)$", report, re.M)
    assert match, report
    return int(match.group(1))


def _rows(module: str, dtype, width: int = 8) -> np.ndarray:
    return np.concatenate(list(hard_inputs(module, dtype, width).values()))


# --- RMSNorm: squaring in the narrow format -------------------------------------------------


def rmsnorm_narrow(x, gamma):
    """The classic defect: squares and their mean in the input's format."""
    ms = np.add.reduce(x * x, axis=-1, dtype=x.dtype, keepdims=True) / x.dtype.type(x.shape[-1])
    return (x / np.sqrt(ms + x.dtype.type(1e-6)) * gamma).astype(x.dtype)


def rmsnorm_float32(x, gamma):
    """Accumulates in float32 and rounds once (squares of bfloat16 entries past 1.8e19
    overflow float32 too: the row "near the largest value" needs float64)."""
    wide = x.astype(np.float32)
    ms = (wide * wide).mean(axis=-1, keepdims=True)
    return (wide / np.sqrt(ms + np.float32(1e-6)) * gamma.astype(np.float32)).astype(x.dtype)


def rmsnorm_wide(x, gamma):
    """Accumulates in float64 and rounds once."""
    wide = x.astype(np.float64)
    ms = (wide * wide).mean(axis=-1, keepdims=True)
    y = wide / np.sqrt(ms + 1e-6) * gamma.astype(np.float64)
    return y.astype(np.float32).astype(x.dtype) if x.dtype == BF16 else y.astype(x.dtype)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_rmsnorm_squaring_in_the_narrow_format_is_caught(dtype):
    x = _rows("rmsnorm", dtype)
    gamma = np.ones(x.shape[-1], dtype=dtype)
    with (
        pytest.raises(AssertionError, match=r"rmsnorm in (float16|bfloat16).*FAILED") as caught,
        np.errstate(over="ignore", invalid="ignore"),
    ):
        assert_matches_reference(rmsnorm_narrow, "rmsnorm", x, gamma, eps=1e-6, grad=False)
    assert "worst forward: index" in str(caught.value)
    report = assert_matches_reference(
        rmsnorm_wide, "rmsnorm", x[np.isfinite(x).all(axis=1)], gamma, eps=1e-6, grad=False
    )
    assert report.passed


def test_rmsnorm_in_bfloat16_over_a_long_row():
    """The README's example: 512 features, bfloat16, squares rounded to bfloat16 and summed
    in bfloat16 are off by more than 1 ULP; float32 accumulation is correctly rounded."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 512)) * 30).astype(BF16)
    gamma = np.ones(512, dtype=BF16)
    with pytest.raises(AssertionError, match="FAILED"):
        assert_matches_reference(rmsnorm_narrow, "rmsnorm", x, gamma, eps=1e-6, grad=False)
    report = assert_matches_reference(rmsnorm_float32, "rmsnorm", x, gamma, eps=1e-6, grad=False)
    assert report.comparisons[0].max_ulp <= 0.5 + 2.0**-8


# --- LayerNorm: an eps that underflows in half precision --------------------------------------


def layernorm_eps_in_half(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True, dtype=np.float32).astype(np.float16)
    return ((x - mean) / np.sqrt(var + np.float16(1e-8)) * gamma + beta).astype(np.float16)


def layernorm_eps_in_float32(x, gamma, beta):
    wide = x.astype(np.float32)
    mean = wide.mean(axis=-1, keepdims=True)
    var = ((wide - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (wide - mean) / np.sqrt(var + np.float32(1e-8)) * gamma.astype(np.float32)
    return (y + beta.astype(np.float32)).astype(np.float16)


def test_layernorm_eps_underflowing_in_half_is_caught():
    assert np.float16(1e-8) == 0  # the defect's cause
    x = hard_inputs("layernorm", F16)["constant row"]
    gamma, beta = np.ones(x.shape[-1], F16), np.zeros(x.shape[-1], F16)
    with pytest.raises(AssertionError, match="FAILED") as caught, np.errstate(invalid="ignore"):
        assert_matches_reference(
            layernorm_eps_in_half, "layernorm", x, gamma, beta, eps=1e-8, grad=False
        )
    assert _nonfinite(str(caught.value), "forward") == x.size  # 0/0 on the constant row
    rows = _rows("layernorm", F16)
    rows = rows[np.isfinite(rows).all(axis=1) & (np.abs(rows).max(axis=1) < 1e4)]
    assert_matches_reference(
        layernorm_eps_in_float32, "layernorm", rows, gamma, beta, eps=1e-8, grad=False
    )


# --- GeLU-tanh: a derivative that is NaN in the tails ----------------------------------------

_C = math.sqrt(2 / math.pi)


def gelu_tanh_forward(x):
    wide = x.astype(np.float64)
    return (0.5 * wide * (1 + np.tanh(_C * (wide + 0.044715 * wide**3)))).astype(x.dtype)


def gelu_tanh_vjp_naive(x, g):
    """The textbook derivative evaluated in half precision: x^2 overflows from |x| = 256,
    and (1 - tanh^2) * inf is NaN."""
    t = np.tanh(x.dtype.type(_C) * (x + x.dtype.type(0.044715) * x**3))
    slope = x.dtype.type(_C) * (1 + x.dtype.type(3 * 0.044715) * x * x)
    return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * slope)).astype(x.dtype)


def gelu_tanh_vjp_wide(x, g):
    w = x.astype(np.float64)
    u = _C * (w + 0.044715 * w**3)
    t = np.tanh(u)
    with np.errstate(over="ignore", invalid="ignore"):
        tail = np.where(
            np.abs(w) > 1e3, 0.0, 0.5 * w * (1 - t * t) * _C * (1 + 3 * 0.044715 * w**2)
        )
    return (g.astype(np.float64) * (0.5 * (1 + t) + tail)).astype(x.dtype)


def test_gelu_tanh_derivative_nan_in_the_tails_is_caught():
    cases = hard_inputs("gelu_tanh", F16)
    x = np.concatenate([cases["tails"], cases["exp overflow"]])
    with (
        pytest.raises(AssertionError, match="FAILED") as caught,
        np.errstate(invalid="ignore", over="ignore"),
    ):
        assert_matches_reference(
            gelu_tanh_forward, "gelu_tanh", x, vjp=gelu_tanh_vjp_naive, budget="ulp:1"
        )
    assert _nonfinite(str(caught.value), "forward") == 0
    assert _nonfinite(str(caught.value), "dx") > 0  # NaN at x = 1000
    report = assert_matches_reference(
        gelu_tanh_forward, "gelu_tanh", x, vjp=gelu_tanh_vjp_wide, budget="ulp:1"
    )
    assert report.passed and [c.name for c in report.comparisons] == ["forward", "dx"]


# --- softmax without the max shift -----------------------------------------------------------


def softmax_unshifted(x):
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def softmax_shifted(x):
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def test_softmax_without_the_max_shift_is_caught():
    x = hard_inputs("softmax", F16)["large logits"]
    with pytest.raises(AssertionError, match="FAILED") as caught, np.errstate(all="ignore"):
        assert_matches_reference(softmax_unshifted, "softmax", x, grad=False)
    assert _nonfinite(str(caught.value), "forward") > 0  # NaN where the exact value is finite
    rows = _rows("softmax", F16)
    rows = rows[np.isfinite(rows).all(axis=1)]
    assert_matches_reference(softmax_shifted, "softmax", rows, grad=False)


# --- attention scaled after Q K^T --------------------------------------------------------------


def attention_scaled_late(X, Wq, Wk, Wv):
    q, k, v = X @ Wq.T, X @ Wk.T, X @ Wv.T
    s = (q @ k.T) / np.float16(math.sqrt(Wq.shape[0]))  # Q K^T overflows first
    return softmax_shifted(s) @ v


def attention_scaled_early(X, Wq, Wk, Wv):
    w = [a.astype(np.float64) for a in (X, Wq, Wk, Wv)]
    q, k, v = w[0] @ w[1].T, w[0] @ w[2].T, w[0] @ w[3].T
    s = (q / math.sqrt(Wq.shape[0])) @ k.T
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v).astype(X.dtype)


def test_attention_scaled_after_qk_is_caught():
    """d = 4 and every entry 150: q . k = 90,000 overflows float16, q . k / 2 does not; and
    hard_inputs' token matrix for it breaks the late scaling the same way."""
    X = np.full((3, 4), 150.0, dtype=F16)
    eye = np.eye(4, dtype=F16)
    hard = hard_inputs("dp_attention", F16, width=4)["logits overflow before scaling"]
    with pytest.raises(AssertionError, match="FAILED"), np.errstate(all="ignore"):
        assert_matches_reference(
            attention_scaled_late, "dp_attention", hard, eye, eye, eye, grad=False
        )
    assert_matches_reference(
        attention_scaled_early, "dp_attention", hard, eye, eye, eye, grad=False
    )
    with pytest.raises(AssertionError, match="FAILED"), np.errstate(all="ignore"):
        assert_matches_reference(
            attention_scaled_late, "dp_attention", X, eye, eye, eye, grad=False
        )
    assert_matches_reference(attention_scaled_early, "dp_attention", X, eye, eye, eye, grad=False)


# --- budgets and warnings ------------------------------------------------------------------


def test_baseline_budget_is_relative_to_strict_half_with_a_floor():
    """An implementation as accurate as the correctly rounded result passes baseline:1 even
    where the naive evaluation is exact (the 0.5 ULP floor, no absolute fudge); one twice
    as wrong as naive half arithmetic fails baseline:1."""
    x = hard_inputs("sigmoid", F16)["every value"]
    x = x[np.isfinite(x)]
    report = assert_matches_reference(
        lambda v: sigmoid.forward(v.astype(np.float64)).astype(np.float16),
        "sigmoid",
        x,
        grad=False,
        budget="baseline:1",
    )
    assert report.comparisons[0].allowed_ulp >= 0.5

    def coarse(v):  # sigmoid with a 6-bit significand: far worse than naive half
        y = sigmoid.forward(v.astype(np.float64))
        return (np.round(y * 64) / 64).astype(np.float16)

    with pytest.raises(AssertionError, match="baseline:1: FAILED"):
        assert_matches_reference(coarse, "sigmoid", x, grad=False, budget="baseline:1")
    with pytest.raises(ValueError, match="strict mode"):
        assert_matches_reference(
            np.tanh, "sigmoid", x.astype(np.float32), grad=False, budget="baseline:1"
        )


def test_baseline_budget_in_bfloat16_for_a_row_norm():
    """bfloat16 LayerNorm (rows of N(0, 1), D = 64): the naive baseline is liptable's strict
    bfloat16 LayerNorm, several ULPs off (8-bit running sums), so baseline:1 allows more
    than the 0.5 ULP floor. A two-pass float32 implementation passes it; the same results
    scaled by 1 + 2^-3 (16 ULPs at |y| = 1) fail it."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32).astype(BF16)
    gamma, beta = np.ones(64, BF16), np.zeros(64, BF16)

    def two_pass(v, w, b):
        v32 = v.astype(np.float32)
        mean = v32.mean(axis=-1, keepdims=True)
        var = ((v32 - mean) ** 2).mean(axis=-1, keepdims=True)
        y = (v32 - mean) / np.sqrt(var + np.float32(1e-5))
        return (y * w.astype(np.float32) + b.astype(np.float32)).astype(BF16)

    def scaled(v, w, b):
        return (two_pass(v, w, b).astype(np.float32) * np.float32(1.125)).astype(BF16)

    args = (x, gamma, beta)
    report = assert_matches_reference(two_pass, "layernorm", *args, grad=False, budget="baseline:1")
    assert report.passed and report.comparisons[0].allowed_ulp > 1.0
    with pytest.raises(AssertionError, match="baseline:1: FAILED"):
        assert_matches_reference(scaled, "layernorm", *args, grad=False, budget="baseline:1")


def test_vacuous_checks_warn():
    x = np.linspace(-3, 3, 7, dtype=np.float32)
    with pytest.warns(VacuousTestWarning, match="own kernel"):
        assert_matches_reference(sigmoid.forward, "sigmoid", x, grad=False)
    with pytest.warns(VacuousTestWarning, match="whole range"):
        assert_matches_reference(np.zeros_like, "sigmoid", x, grad=False, budget="ulp:1e9")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_matches_reference(
            lambda v: sigmoid.forward(v.astype(np.float64)).astype(np.float32),
            "sigmoid",
            x,
            grad=False,
        )


def test_numpy_gradients_need_a_vjp():
    with pytest.raises(ValueError, match="vjp="):
        assert_matches_reference(np.tanh, "sigmoid", np.zeros(3))


@settings(max_examples=20)
@given(hard_input_strategy("layernorm", F16))
def test_hard_input_strategy_draws_rows_of_the_format(row):
    assert row.dtype == F16 and row.shape == (1, 8)


def test_torch_rmsnorm_bfloat16():
    """With PyTorch: autograd's gradients are compared too."""
    torch = pytest.importorskip("torch")

    def narrow(x, gamma):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * gamma

    def wide(x, gamma):
        xf = x.float()
        y = xf * torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + 1e-6) * gamma.float()
        return y.to(torch.bfloat16)

    torch.manual_seed(0)
    x = (torch.randn(8, 512) * 30).to(torch.bfloat16)
    gamma = torch.ones(512, dtype=torch.bfloat16)
    with pytest.raises(AssertionError, match="dgamma"):
        assert_matches_reference(narrow, "rmsnorm", x, gamma, eps=1e-6)
    report = assert_matches_reference(wide, "rmsnorm", x, gamma, eps=1e-6)
    assert [c.name for c in report.comparisons] == ["forward", "dx", "dgamma"]


def _float32_swish(x):
    return (x / (np.float32(1) + np.exp(-x))).astype(np.float32)


def _float32_swish_vjp(x, g):
    s = (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)
    return (g * (s * (np.float32(1) + x * (np.float32(1) - s)))).astype(np.float32)


def test_bound_budget_follows_the_conditioning():
    """'bound:K' allows each element 0.5 + K u (|y| + S)/spacing ULPs, S the componentwise
    condition: a stable float32 Swish (forward and VJP, 1.9 and 4.9 ULPs at worst) passes
    bound:4 though it fails ulp:1; GeLU through 1 + erf(x/sqrt 2) in float32 cancels in its
    left tail (about 1.7e7 ULPs at x = -5.6, where the condition allows some 70) and fails;
    so does LayerNorm's one-pass variance E[x^2] - mean^2 on rows with a large mean, where
    the two-pass variance, whose error the conditioning of such rows explains, passes."""
    x = np.linspace(-12, 6, 200).astype(np.float32)
    assert not compare(_float32_swish, "swish", x, grad=False, budget="ulp:1").passed
    swish = compare(_float32_swish, "swish", x, vjp=_float32_swish_vjp, budget="bound:4")
    assert swish.passed, str(swish)
    assert not compare(_float32_swish, "swish", x, grad=False, budget="bound:0").passed

    def float32_gelu(v):
        erf = np.vectorize(lambda t: np.float32(math.erf(float(t) / math.sqrt(2.0))))
        return (v * np.float32(0.5) * (np.float32(1) + erf(v).astype(np.float32))).astype(
            np.float32
        )

    gelu = compare(float32_gelu, "gelu", x, grad=False, budget="bound:4")
    assert not gelu.passed and gelu.comparisons[0].max_ulp > 1e6, str(gelu)
    assert 10 < gelu.comparisons[0].allowed_ulp < 1000, str(gelu)

    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((4, 16)) * 1e-3 + 100).astype(np.float32)
    gamma, beta = np.ones(16, np.float32), np.zeros(16, np.float32)

    def layernorm(one_pass):
        def run(v, g, b):
            mean = v.mean(-1, keepdims=True, dtype=np.float32)
            if one_pass:
                var = np.maximum((v * v).mean(-1, keepdims=True, dtype=np.float32) - mean**2, 0)
            else:
                var = ((v - mean) ** 2).mean(-1, keepdims=True, dtype=np.float32)
            return ((v - mean) / np.sqrt(var + np.float32(1e-5)) * g + b).astype(np.float32)

        return run

    two = compare(layernorm(False), "layernorm", rows, gamma, beta, grad=False, budget="bound:2")
    one = compare(layernorm(True), "layernorm", rows, gamma, beta, grad=False, budget="bound:2")
    assert two.passed and not one.passed, (str(two), str(one))


def test_bound_budget_refuses_inputs_too_large_to_differentiate():
    x = np.zeros(BOUND_ENTRIES + 1, np.float32)
    with pytest.raises(ValueError, match="differentiates every input entry"):
        compare(_float32_swish, "swish", x, grad=False, budget="bound:1")
