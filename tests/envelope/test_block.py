"""Block envelopes: the composition of the per-module envelopes, checked against the
modules' own envelopes, against Jacobians computed here independently at random points and
parameters (the proven gains must never be exceeded), against the kernels' forward values,
and through weights files (.npz and .safetensors) and the command line."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from safetensors.numpy import save_file

from derive.cli import main
from derive.envelope import block, envelope
from derive.envelope.block import PRESETS, Residual, Stage, block_envelope, kernel_check, parse
from derive.envelope.core import FORMATS
from kernels import gelu, layernorm
from kernels.cast import cast

DIM, HIDDEN, EPS = 6, 10, 0.5


def _layernorm_jacobian(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """diag(gamma) r (I - 11^T/D - z z^T/D), z = (x - mean) r, r = 1/sqrt(var + eps)."""
    d = x.size
    r = 1 / np.sqrt(np.var(x) + eps)
    z = (x - x.mean()) * r
    return gamma[:, None] * r * (np.eye(d) - np.ones((d, d)) / d - np.outer(z, z) / d)


def _gelu_prime(h: np.ndarray) -> np.ndarray:
    """Phi(h) + h phi(h) with libm's erf (not the kernels')."""
    erf = np.vectorize(math.erf)(h / math.sqrt(2))
    return 0.5 * (1 + erf) + h * np.exp(-h * h / 2) / math.sqrt(2 * math.pi)


def test_presets_parse_into_their_stages():
    (res,) = parse("pre-ln-mlp", dim=8, hidden=32)
    assert isinstance(res, Residual)
    assert [(s.module, s.name, s.width) for s in res.branch] == [
        ("layernorm", "ln", None),
        ("linear", "fc1", 32),
        ("gelu", "act", None),
        ("linear", "fc2", 8),
    ]
    res, ln = parse("post-ln-mlp", dim=8)
    assert ln == Stage("layernorm", "ln") and res.branch[1].width is None
    assert res.branch[0].width == 32  # hidden defaults to 4 D
    assert set(PRESETS) == {
        "pre-ln",
        "post-ln",
        "pre-ln-transformer",
        "post-ln-transformer",
        "pre-ln-mlp",
        "post-ln-mlp",
        "resnet-basic",
    }
    assert parse("pre-ln", dim=8) == parse("pre-ln-transformer", dim=8)
    attention, mlp = parse("pre-ln-transformer", dim=8, hidden=16)
    assert [s.module for s in attention.branch] == ["layernorm", "dp_attention"]
    assert [s.width for s in mlp.branch] == [None, 16, None, 8]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("res(linear:4", "closing parenthesis"),
        ("res()", "empty res"),
        ("softmax", "not \\[name=\\]module"),
        ("gelu:4", "only linear and conv2d take a width"),
        ("linear:0", "positive"),
        ("relu)", "unexpected"),
    ],
)
def test_malformed_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        parse(spec, dim=4)


@pytest.mark.parametrize(
    ("option", "value"),
    [("tokens", 0), ("hidden", -1), ("head", 0), ("input_max", float("nan")), ("weight_max", -1.0)],
)
def test_bad_sizes_and_bounds_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        block_envelope("pre-ln-transformer", dim=4, witness=False, **{option: value})


def test_a_branch_that_changes_the_width_is_refused():
    with pytest.raises(ValueError, match="must keep the width 4"):
        block_envelope("res(linear:8)", dim=4, witness=False)


def test_the_chain_is_the_product_of_the_module_envelopes():
    """The block's gain at its input is (1 + fc2 * gelu * fc1 * LN) times one rounding per
    stage and one for the residual sum, each factor the module's own envelope gain."""
    e = block_envelope(
        "pre-ln-mlp", "float16", dim=DIM, hidden=HIDDEN, weight_max=0.25, eps=EPS, witness=False
    )
    ln = envelope("layernorm", dim=DIM, eps=EPS, witness=False).model.gain_max.value
    fc1 = envelope("linear", dim=DIM, out_dim=HIDDEN, weight_max=0.25, witness=False)
    fc2 = envelope("linear", dim=HIDDEN, out_dim=DIM, weight_max=0.25, witness=False)
    act = envelope("gelu", witness=False).model.gain_max.value
    growth = 1 + 2.0**-11
    branch = float(fc2.model.gain_max.value) * float(act) * float(fc1.model.gain_max.value)
    branch *= float(ln) * growth**4
    expected = (1 + branch) * growth
    assert float(e.stages[0].gain) == pytest.approx(expected, rel=1e-12)
    lemma = 1 + (
        float(fc2.model.gain_2.value)
        * float(act)
        * float(fc1.model.gain_2.value)
        * float(envelope("layernorm", dim=DIM, eps=EPS, witness=False).model.gain_2.value)
    )
    assert float(e.stages[0].lemma3) == pytest.approx(lemma, rel=1e-12)


def test_a_gain_beyond_the_format_proves_no_gradient_safe():
    e = block_envelope("pre-ln", "float8_e4m3fn", dim=64, eps=1e-12, witness=False)
    assert e.safe == 0
    assert any("none proven" in line for line in e.lines())


def test_the_safe_gradient_is_the_largest_that_cannot_overflow():
    e = block_envelope("pre-ln-mlp", dim=64, weight_max=0.06, eps=1e-5, witness=False)
    fmt, b = e.format, e.binding
    assert b.gain is not None and b.safe is not None
    assert not fmt.overflows(b.gain, b.safe)
    assert fmt.overflows(b.gain, fmt.next_up(b.safe))
    assert all(s.safe is None or s.safe >= b.safe for s in e.stages)


def _random_block(rng) -> dict[str, np.ndarray]:
    return {
        "ln.weight": rng.uniform(-2, 2, DIM),
        "ln.bias": rng.uniform(-1, 1, DIM),
        "fc1.weight": rng.uniform(-0.7, 0.7, (HIDDEN, DIM)),
        "fc1.bias": rng.uniform(-0.3, 0.3, HIDDEN),
        "fc2.weight": rng.uniform(-0.7, 0.7, (DIM, HIDDEN)),
        "fc2.bias": rng.uniform(-0.3, 0.3, DIM),
    }


@pytest.mark.parametrize("seed", range(6))
def test_no_point_exceeds_the_proven_gains_or_forward_bounds(seed):
    """Pre-LN MLP with parameters from a dict: at random inputs within the bound (nearly
    constant ones included, where LayerNorm's gain peaks) the column sums of |J| from each
    stage's input to the output, computed here in closed form, stay below the envelope's
    gains, and the forward values below its bounds."""
    rng = np.random.default_rng(seed)
    w = _random_block(rng)
    e = block_envelope(
        "pre-ln-mlp", dim=DIM, hidden=HIDDEN, eps=EPS, input_max=3.0, weights=w, witness=False
    )
    rows = {s.label.split(" = ")[0]: s for s in e.stages}
    for k in range(40):
        spread = 10.0 ** rng.uniform(-6, 0)
        x = np.clip(rng.uniform(-3, 3) + spread * rng.standard_normal(DIM), -3, 3)
        J_ln = _layernorm_jacobian(x, w["ln.weight"], EPS)
        z = layernorm.forward(x[None], w["ln.weight"], w["ln.bias"], EPS)[0]
        h = w["fc1.weight"] @ z + w["fc1.bias"]
        a = gelu.forward(h)
        y = w["fc2.weight"] @ a + w["fc2.bias"]
        fc2 = np.eye(DIM) @ w["fc2.weight"]
        act = fc2 @ np.diag(_gelu_prime(h))
        fc1 = act @ w["fc1.weight"]
        ln = fc1 @ J_ln
        block = np.eye(DIM) + ln
        for name, J in (("fc2", fc2), ("act", act), ("fc1", fc1), ("ln", ln), ("res", block)):
            realized = np.abs(J).sum(axis=0).max()
            assert realized <= float(rows[name].gain), (name, k, realized)
        for name, value in (("ln", z), ("fc1", h), ("act", a), ("fc2", y), ("res", x + y)):
            assert np.abs(value).max() <= float(rows[name].forward), (name, k)


def test_weights_files_npz_and_safetensors_agree(tmp_path):
    rng = np.random.default_rng(7)
    w = _random_block(rng)
    np.savez(tmp_path / "block.npz", **w)
    save_file({k: v.astype(np.float32) for k, v in w.items()}, str(tmp_path / "block.safetensors"))
    w32 = {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}
    np.savez(tmp_path / "block32.npz", **w32)
    kwargs = dict(dim=DIM, hidden=HIDDEN, eps=EPS, witness=False)
    from_npz = block_envelope("pre-ln-mlp", weights=tmp_path / "block32.npz", **kwargs)
    from_st = block_envelope("pre-ln-mlp", weights=tmp_path / "block.safetensors", **kwargs)
    assert [s.safe for s in from_npz.stages] == [s.safe for s in from_st.stages]
    assert all(s.source == "weights" for s in from_st.stages if s.label.startswith("fc"))
    columns = np.abs(w32["fc2.weight"]).sum(axis=0).max()  # fc2's gain: its column sums
    fc2 = next(s for s in from_st.stages if s.label.startswith("fc2"))
    assert float(fc2.gain) == pytest.approx(columns * (1 + 2.0**-11), rel=1e-15)
    assert float(fc2.gain) >= columns * (1 + 2.0**-11)  # rounded up, never down
    with pytest.raises(ValueError, match=r"fc1.weight: expected shape \(10, 6\)"):
        bad = dict(w, **{"fc1.weight": np.zeros((6, 10))})
        block_envelope("pre-ln-mlp", weights=bad, **kwargs)
    with pytest.raises(ValueError, match=r"\.npz or \.safetensors"):
        block_envelope("pre-ln-mlp", weights=tmp_path / "block.txt", **kwargs)


def test_the_witness_never_exceeds_the_bounds_and_names_its_limits():
    e = block_envelope("pre-ln-mlp", dim=16, hidden=32, weight_max=0.1, eps=1e-3)
    assert "evidence" in e.witness_note
    for s in e.stages:
        assert s.witness_gain is not None and 0 < s.witness_gain <= float(s.gain), s.label
    last = e.stages[-1]  # fc2 alone: all-positive weights reach its column sum O w
    assert last.witness_gain == pytest.approx(16 * 0.1, rel=1e-12)
    resnet = block_envelope("resnet-basic", dim=64, weight_max=0.1, batch=1 << 20)
    assert resnet.stages[0].witness_gain is None and "not built" in resnet.witness_note


def test_forward_overflow_is_reported_where_the_bound_reaches_the_format():
    e = block_envelope("res(fc=linear:64, relu, out=linear:8)", dim=8, input_max=200.0)
    assert [s.label.split(" = ")[0] for s in e.stages if s.forward_overflows] == [
        "res",
        "out",
    ]
    fmt = FORMATS["float16"]
    out = next(s for s in e.stages if s.label.startswith("out"))
    assert out.forward.times_reaches(Fraction(1), fmt.overflow)  # 64 * 8 * 200 > 65520
    small = block_envelope("res(fc=linear:64, relu, out=linear:8)", dim=8, input_max=1.0)
    assert not any(s.forward_overflows for s in small.stages)


def test_cli_prints_the_stages_and_json(capsys):
    assert main(["envelope", "--block", "pre-ln-mlp", "--dim", "8", "--eps", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "safe block output gradient (loss scale)" in text and "fc2 = linear (32 -> 8)" in text
    args = ["envelope", "--block", "post-ln-mlp", "--dim", "8", "--json", "--weight-max", "0.1"]
    assert main(args) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["binding_stage"] and record["stages"][0]["label"] == "block input"
    args = ["envelope", "--block", "pre-ln-transformer", "--dim", "8", "--tokens", "3"]
    assert main([*args, "--head", "4", "--hidden", "16"]) == 0
    assert "attn = dp_attention (8)" in capsys.readouterr().out
    assert main(["envelope", "layernorm", "--block", "pre-ln-mlp"]) == 2
    assert main(["envelope", "--block", "res(linear:4"]) == 2
    assert main(["envelope", "--block", "pre-ln", "--out-dim", "4"]) == 2  # a module option
    assert main(["envelope"]) == 2


@pytest.mark.parametrize("seed", range(4))
def test_the_attention_gain_bounds_the_kernels_jacobian(seed):
    """DP attention inside a block, with inputs bounded by R: at random token matrices
    within R (logits from small to saturating) and random weights, the largest column sum of
    |J| (the kernel's Jacobian, d vec(Y)/d vec(X)) stays below the stage's proven gain, and
    max|Y| below its forward bound."""
    from kernels import dp_attention

    rng = np.random.default_rng(100 + seed)
    n, d, head, R = 5, 4, 3, 2.0
    scale = 10.0 ** rng.uniform(-1, 0.7)
    w = {
        "attn.wq": rng.uniform(-scale, scale, (head, d)),
        "attn.wk": rng.uniform(-scale, scale, (head, d)),
        "attn.wv": rng.uniform(-1, 1, (d, d)),
    }
    e = block_envelope(
        "attn=dp_attention", dim=d, tokens=n, head=head, input_max=R, weights=w, witness=False
    )
    stage = e.stages[1]
    assert stage.source == "weights"
    for _ in range(20):
        X = R * rng.uniform(-1, 1, (n, d))
        X[rng.random((n, d)) < 0.3] = R * rng.choice((-1.0, 1.0))
        J = dp_attention.jacobian(X, w["attn.wq"], w["attn.wk"], w["attn.wv"])
        assert np.abs(J).sum(axis=0).max() <= float(stage.gain)
        Y = dp_attention.forward(X, w["attn.wq"], w["attn.wk"], w["attn.wv"])
        assert np.abs(Y).max() <= float(stage.forward)
    by_bounds = block_envelope("attn=dp_attention", dim=d, tokens=n, witness=False)
    assert by_bounds.stages[1].gain is not None  # bounded inputs: a finite gain
    assert by_bounds.stages[1].source == "bounds"


def test_transformer_blocks_have_witnesses_below_their_bounds():
    for spec in ("pre-ln-transformer", "post-ln-transformer"):
        e = block_envelope(spec, dim=8, hidden=16, tokens=3, weight_max=0.2, eps=1e-3)
        assert "evidence" in e.witness_note, spec
        for s in e.stages:
            assert s.witness_gain is not None and s.witness_gain <= float(s.gain), (spec, s)


@pytest.mark.parametrize("fmt", ["float8_e5m2", "float8_e4m3fn"])
def test_check_in_fp8_rounds_every_stage(fmt):
    """FP8 (mixed mode: the float64 kernels, every stage's output and residual sum rounded
    once to the format): finite at the proven safe size, every stored value an FP8 value,
    and not finite past the format (inf, or NaN in E4M3) at a gradient of 50000."""
    e = block_envelope("pre-ln-mlp", fmt, dim=8, eps=0.5)
    assert e.safe is not None
    safe = kernel_check(e, e.safe)
    assert safe["finite"] and 0 < safe["max_abs_dx"] <= float(e.safe) * float(e.stages[0].gain)
    top = np.array([safe["max_abs_dx"]])
    assert cast(top, fmt).astype(np.float64)[0] == top[0]  # an FP8 value
    assert not kernel_check(e, 50000)["finite"]


def test_check_runs_the_witness_through_the_kernels(capsys):
    """At the safe size the kernels' backward pass stays finite (and, the bound being
    loose, far below the threshold); at a size past the threshold it overflows. Blocks
    without a witness are refused."""
    e = block_envelope("pre-ln", "float16", dim=16, hidden=32, tokens=4, weight_max=0.1, eps=1e-3)
    safe = kernel_check(e, e.safe)
    assert safe["finite"] and 0 < safe["max_abs_dx"] <= float(e.safe) * float(e.stages[0].gain)
    assert safe["max_abs_dx"] == pytest.approx(float(e.safe) * e.stages[0].witness_gain, rel=0.02)
    assert not kernel_check(e, 60000)["finite"]
    with pytest.raises(ValueError, match="no witness"):
        kernel_check(block_envelope("resnet-basic", dim=64, batch=1 << 20), 1)
    args = ["envelope", "--block", "pre-ln-mlp", "--dim", "8", "--eps", "0.5", "--check"]
    assert main(args) == 0
    assert capsys.readouterr().out.count("every gradient finite: True") == 2


@pytest.mark.parametrize(
    ("spec", "config"),
    [("pre-ln", {"dim": 16, "hidden": 64, "tokens": 4}), ("pre-ln-mlp", {"dim": 32, "hidden": 96})],
)
def test_matrix_free_witness_realizes_at_most_the_dense_column_sums(spec, config):
    """The matrix-free witness (VJPs at sign patterns) realizes gains that the dense
    Jacobians' largest column sums bound, row by row, at the same point; each is positive."""
    e = block_envelope(spec, "float16", witness=False, eps=1e-5, input_max=10.0, **config)
    rng = np.random.default_rng(1)
    params = block._parameters(e, rng, extremal=False)
    x = rng.uniform(-10, 10, (block._tokens(e), config["dim"]))
    dense, _ = block._realized(e, params, x)
    free, signs = block._realized_by_passes(e, params, x)
    assert set(np.unique(signs)) <= {-1.0, 1.0}
    for a, b in zip(dense, free, strict=True):
        assert 0 < b <= a * (1 + 1e-12)


def test_wide_blocks_get_a_witness_that_the_kernels_run():
    """Above the dense witness's width the matrix-free one is built; the kernels' backward
    pass at the proven safe size stays finite and within the proven gain."""
    e = block_envelope("res(ln=layernorm, act=gelu)", "float16", dim=5000, eps=1e-3)
    assert e.witness_point is not None and "no dense Jacobian" in e.witness_note
    for s in e.stages:
        assert s.witness_gain is not None and 0 < s.witness_gain <= float(s.gain), s
    safe = kernel_check(e, e.safe)
    assert safe["finite"] and 0 < safe["max_abs_dx"] <= float(e.safe) * float(e.stages[0].gain)


def _square_of_sqrt_at_least(bound: Fraction, rational: int, root_of: int) -> bool:
    """Whether ``bound >= rational + sqrt(root_of)``, decided exactly."""
    return bound >= rational and (bound - rational) ** 2 >= root_of


def test_the_spectral_bound_encloses_the_2_norm_tightly():
    """``_spectral_square_up`` bounds ||W||_2^2 from above, exactly where the value is known
    in closed form, and within the few percent its squarings promise elsewhere; scaling W
    by 2^k scales the bound by 4^k (the exponent bookkeeping of its rescaled powers)."""
    square = block._spectral_square_up
    # W^T W = [[10, 14], [14, 20]]: lambda_max = 15 + sqrt(221)
    bound = square(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert _square_of_sqrt_at_least(bound, 15, 221)
    assert float(bound) <= (15 + math.sqrt(221)) * 1.01
    assert square(np.ones((5, 7))) >= 35 and float(square(np.ones((5, 7)))) <= 35 * 1.01
    rng = np.random.default_rng(3)
    for shape in ((200, 300), (300, 120)):
        W = rng.normal(0, 0.02, shape)
        exact = np.linalg.norm(W, 2) ** 2
        assert exact * (1 - 1e-12) <= float(square(W)) <= exact * 1.06, shape
        assert square(np.ldexp(W, -300)) == square(W) / 2**600
        assert square(np.ldexp(W, 200)) == square(W) * 2**400
    assert float(square(rng.normal(0, 1e-3, (40, 40)))) < float(square(np.ones((40, 40))))
    with pytest.raises(ValueError, match="finite"):
        square(np.array([[1.0, np.inf]]))


def test_the_attention_2_norm_gain_bounds_the_kernels_jacobian():
    """The 2-norm of DP attention's Jacobian (the kernel's, d vec(Y)/d vec(X)) stays below
    ``sqrt(N) s_v + s_q s_k s_v ||X||_F^2/sqrt(d)`` at random token matrices and weights,
    from near-uniform to saturating logits; the first term alone is not a bound."""
    from kernels import dp_attention

    rng = np.random.default_rng(11)
    n, d, head = 4, 6, 5
    ratios, first = [], []
    for _ in range(60):
        scale = 10.0 ** rng.uniform(-1, 0.5)
        wq, wk = rng.normal(0, scale, (head, d)), rng.normal(0, scale, (head, d))
        wv = rng.normal(0, 1, (d, d))
        X = rng.normal(0, 10.0 ** rng.uniform(-1, 0.7), (n, d))
        norm = np.linalg.norm(dp_attention.jacobian(X, wq, wk, wv), 2)
        s = [Fraction(float(np.linalg.norm(w, 2) * (1 + 1e-12))) for w in (wq, wk, wv)]
        x_square = Fraction(float(np.sum(X * X) * (1 + 1e-12)))
        bound = block._attention_gain_2(n, *s, x_square, 1 / Fraction(math.sqrt(head) * 0.999))
        ratios.append(norm / float(bound))
        first.append(norm / (math.sqrt(n) * float(s[2])))
    assert max(ratios) <= 1
    assert max(first) > 2


def _chains(e, spec: str, dim: int, hidden: int | None = None):
    """The max-norm chain alone (no 2-norm route) and the 2-norm chain with the roundings,
    at the block input of ``e``, walked here from the same stage bounds."""
    nodes = parse(PRESETS[spec].format(dim=dim, hidden=hidden), dim, hidden)
    walk = block._Walk(e.config, block.Real.rational(1 + Fraction(1, 2**e.format.precision)))
    bound = block.Real.rational(Fraction(e.config.input_max))
    rows = block._forward(nodes, bound, Fraction(e.config.input_max) * dim, dim, walk, 0)[3]
    found = {id(node): (None, bounds) for *_, bounds, node in rows}
    one = block.Real.rational(Fraction(1))
    max_norm, _, two_norm = block._backward(nodes, (one, one, one), walk, found)
    return max_norm, two_norm


@pytest.mark.parametrize("spec", ["pre-ln-transformer", "pre-ln-mlp"])
def test_token_wise_blocks_take_the_smaller_of_the_two_routes(spec):
    """With GPT-2-like weights (small, Gaussian) the 2-norm route (sqrt(N D) times the
    2-norm chain, roundings included) beats the max-norm chain at the block input; the gain
    printed is that smaller bound, and the dense witness stays below it at every stage. A
    ResNet block (convolutions, BatchNorm) keeps the max-norm chain alone."""
    dim, hidden, tokens = 16, 64, 4
    rng = np.random.default_rng(5)
    weights = {
        "fc1.weight": rng.normal(0, 0.05, (hidden, dim)),
        "fc2.weight": rng.normal(0, 0.05, (dim, hidden)),
        **{f"attn.{k}": rng.normal(0, 0.05, (dim, dim)) for k in ("wq", "wk", "wv")},
    }
    config = {"dim": dim, "hidden": hidden, "eps": 1e-5, "input_max": 10.0, "weights": weights}
    e = block_envelope(spec, tokens=tokens, **config)
    max_norm, two_norm = _chains(e, spec, dim, hidden)
    entries = dim * (tokens if spec == "pre-ln-transformer" else 1)
    assert float(e.stages[0].gain) < float(max_norm)
    assert float(e.stages[0].gain) <= float(two_norm) * math.sqrt(entries) * (1 + 1e-9)
    for s in e.stages:
        assert s.witness_gain is not None and s.witness_gain <= float(s.gain), s
    resnet = block_envelope("resnet-basic", dim=4, batch=8, weight_max=0.01, witness=False)
    max_norm, two_norm = _chains(resnet, "resnet-basic", 4)
    assert float(resnet.stages[0].gain) == float(max_norm)


@pytest.mark.parametrize("spec", ["pre-ln-transformer", "pre-ln-mlp"])
def test_a_weight_norm_bound_holds_for_every_matrix_within_it(spec):
    """``weight_norm = s`` (no weights given, the entrywise bound far away): at random
    weights of 2-norm s and random inputs, near-constant rows included, the dense Jacobians'
    column sums from each stage's input stay below the proven gains, and the bound is
    tighter than the entrywise one alone."""
    dim, hidden, tokens, s = 8, 24, 3, 0.8
    config = {"dim": dim, "hidden": hidden, "tokens": tokens, "eps": 1e-3, "input_max": 4.0}
    e = block_envelope(spec, weight_norm=s, weight_max=5.0, witness=False, **config)
    loose = block_envelope(spec, weight_max=5.0, witness=False, **config)
    assert float(e.stages[0].gain) < float(loose.stages[0].gain)
    rng = np.random.default_rng(9)
    for _ in range(12):
        params = block._parameters(e, rng, extremal=False)
        for key, W in params.items():
            if W.ndim == 2:
                params[key] = W * (s / np.linalg.norm(W, 2) * (1 - 1e-12))
        spread = 10.0 ** rng.uniform(-6, 0)
        x = 4.0 * np.clip(rng.uniform(-1, 1) + spread * rng.uniform(-1, 1, (tokens, dim)), -1, 1)
        dense, _ = block._realized(e, params, x)
        for stage, realized in zip(e.stages, dense, strict=True):
            assert realized <= float(stage.gain), (stage.label, realized)


def test_weight_norm_is_an_option_of_blocks_only(capsys):
    assert main(["envelope", "layernorm", "--weight-norm", "1"]) == 2
    assert "--weight-norm" in capsys.readouterr().err
    args = ["envelope", "--block", "pre-ln", "--dim", "32", "--tokens", "4", "--eps", "1e-5"]
    assert main(args) == 0
    assert "--weight-norm" in capsys.readouterr().out  # none proven: the hint
    assert main([*args, "--weight-norm", "1"]) == 0
    assert "safe block output gradient (loss scale)" in capsys.readouterr().out


def test_witness_weights_stay_within_the_norm_and_entry_bounds():
    """The witness's matrices under ``weight_norm``: within both bounds; the extremal ones
    have every singular value at the norm (not rank one, which LayerNorm's zero-mean rows
    would annihilate) unless the entry bound shrinks them."""
    rng = np.random.default_rng(2)
    for size in ((12, 5), (5, 12)):
        W = block._within_norm(size, 1.0, 0.7, rng, extremal=True)
        assert np.allclose(np.linalg.svd(W, compute_uv=False), 0.7, rtol=1e-9)
        for extremal, bound in ((False, 1.0), (True, 0.05), (False, 0.05)):
            W = block._within_norm(size, bound, 0.7, rng, extremal)
            assert np.linalg.norm(W, 2) <= 0.7 and np.abs(W).max() <= bound


def test_image_blocks_get_a_witness_that_the_kernels_run():
    """A ResNet basic block's witness runs the convolution and BatchNorm kernels on an
    (N, C, s, s) batch with N s^2 = batch: positive gains below the proven ones at every
    stage, and the kernels' float16 backward at the safe size stays finite and within the
    proven gain. A batch above the size limit is named, not run."""
    e = block_envelope("resnet-basic", "float16", dim=4, batch=8, weight_max=0.3, eps=1e-3)
    assert block._witness_shape(e) == (2, 4, 2, 2)
    assert "image batches of 2 x 4 x 2 x 2 and, for near-constant inputs, 8 x 4 x 1 x 1" in (
        e.witness_note
    )
    for s in e.stages:
        assert s.witness_gain is not None and 0 < s.witness_gain <= float(s.gain), s
    run = kernel_check(e, e.safe)
    assert run["finite"] and 0 < run["max_abs_dx"] <= float(e.safe) * float(e.stages[0].gain)
    big = block_envelope("resnet-basic", dim=64, batch=32 * 56 * 56, weight_max=0.06)
    assert big.witness_point is None and "392 x 64 x 16 x 16" in big.witness_note


@pytest.mark.parametrize("shape", [(3072, 768), (64, 64, 3, 3), (5, 7), (1, 9)])
def test_abs_sums_are_the_largest_correctly_rounded_sum(shape):
    """The candidates NumPy's sums leave give math.fsum's largest row sum exactly, also when
    rows tie or differ in their last bits."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal(shape)
    W.reshape(shape[0], -1)[-1] = W.reshape(shape[0], -1)[0] * (1 + 2.0**-52)  # a near tie
    for axis in range(W.ndim):
        rows = np.moveaxis(np.abs(W), axis, -1).reshape(-1, W.shape[axis])
        block._OF_WEIGHTS.clear()
        assert block._abs_sums(W, axis) == max(math.fsum(row) for row in rows)
    block._OF_WEIGHTS.clear()
    assert block._abs_sums(np.ones((40, 30)), 1) == 30.0


def test_frozen_weights_are_hashed_once_and_cannot_go_stale(monkeypatch):
    """A frozen array's digest is taken when it is frozen; a writeable array is hashed at
    every use, so writing into it between two uses gives the new content's result."""
    rng = np.random.default_rng(4)
    W = rng.standard_normal((6, 5))
    hashed = []
    real = block.hashlib.sha256
    monkeypatch.setattr(block.hashlib, "sha256", lambda data: hashed.append(1) or real(data))
    frozen = block.frozen_weights({"w": W})["w"]
    assert np.array_equal(frozen, W) and frozen is not W and len(hashed) == 1
    with pytest.raises(ValueError, match="read-only"):
        frozen[0, 0] = 1.0
    block._OF_WEIGHTS.clear()
    sums = [block._abs_sums(frozen, axis) for axis in (0, 1, 0, 1)]
    assert len(hashed) == 1
    assert sums[:2] == [max(math.fsum(np.abs(r)) for r in M) for M in (W.T, W)]
    block._OF_WEIGHTS.clear()
    first = block._abs_sums(W, 1)
    W[0] *= 4.0
    assert block._abs_sums(W, 1) == max(math.fsum(np.abs(row)) for row in W) > first
    assert len(hashed) == 3
