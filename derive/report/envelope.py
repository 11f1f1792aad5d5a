"""The report's "FP16 envelopes" section: safe upstream-gradient sizes with their proofs.

Every number comes from :func:`derive.envelope.modules.envelope` (exact or arb decisions),
the blocks' from :func:`derive.envelope.block.block_envelope` with seeded weights; the
max-norm constants K(D) of LayerNorm/BatchNorm and RMSNorm are verified by the proofs of
``proofs/envelope.py`` for every D in the tables, and the witnesses are run through the
kernels by ``tests/envelope/test_modules.py``.
"""

from __future__ import annotations

import math

import numpy as np

from derive.envelope.block import block_envelope, frozen_weights
from derive.envelope.modules import envelope, layernorm_k, models, rmsnorm_k
from derive.envelope.strict import STRICT_MODULES, strict_thresholds
from derive.report.figures import loglog_figure
from proofs.envelope import verified

#: The configurations of the main table.
TABLE_DIMS = (768, 1024, 4096, 8192)
TABLE_EPS = (1e-5, 1e-6, 1e-12)
#: The figure: safe size against eps for these (module, D) curves.
FIGURE_CURVES = (
    ("layernorm", 768),
    ("layernorm", 4096),
    ("rmsnorm", 768),
    ("rmsnorm", 4096),
    ("batchnorm", 32),
    ("batchnorm", 256),
)
FIGURE_EPS = tuple(10.0 ** (-12 + i / 4) for i in range(41))  # 1e-12 .. 1e-2
FIGURE = "figures/fp16_safe_gradient.svg"

#: One configuration per module for the overview table (the CLI defaults otherwise).
OVERVIEW = {
    "linear": {"dim": 768, "out_dim": 3072, "weight_max": 0.125},
    "conv2d": {"channels": 64, "out_dim": 64, "weight_max": 0.0625},
    "sigmoid": {},
    "softmax": {"dim": 768},
    "relu": {},
    "gelu": {},
    "swish": {},
    "dp_attention": {"tokens": 8, "dim": 64},
    "l2_attention": {"tokens": 8, "dim": 64},
    "scs_attention": {"tokens": 8, "dim": 64},
    "layernorm": {"dim": 768, "eps": 1e-5},
    "batchnorm": {"dim": 256, "eps": 1e-5},
    "weightnorm": {"dim": 768, "out_dim": 768, "eps": 1e-5},
    "rmsnorm": {"dim": 768, "eps": 1e-6},
    "centernorm": {"dim": 768},
    "residual": {"dim": 768, "weight_max": 0.125},
    "weighted_residual": {"dim": 768, "weight_max": 0.125, "nu_max": 0.25},
    "maxpool": {"dim": 768},
    "avgpool": {"dim": 768},
}


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped."""
    return text.replace("|", "\\|")


def _g(value) -> str:
    return "every finite" if value is None else ("none" if value == 0 else f"{float(value):.6g}")


def _main_table() -> list[str]:
    lines = [
        "| module | D | eps | 2-norm gain | max-norm gain | K(D) | safe g, float16 | "
        "witness overflows at | safe g, bfloat16 | K(D) proof |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for module in ("layernorm", "rmsnorm", "batchnorm"):
        for dim in TABLE_DIMS:
            kind = "rmsnorm" if module == "rmsnorm" else "layernorm"
            proof = "verified" if verified(kind, dim) else "NOT verified"
            k_value = float(rmsnorm_k(dim)[0] if kind == "rmsnorm" else layernorm_k(dim)[0])
            for eps in TABLE_EPS:
                e = envelope(module, "float16", dim=dim, eps=eps)
                b = envelope(module, "bfloat16", witness=False, dim=dim, eps=eps)
                gain_max = float(e.model.gain_max.value)
                w = e.witness
                lines.append(
                    f"| {module} | {dim} | {eps:g} | {float(e.model.gain_2.value):.6g} | "
                    f"{gain_max:.8g} | {k_value:.8g} | {_g(e.safe)} | "
                    f"{float(w.outside):.6g} ({w.steps} step{'s' if w.steps > 1 else ''}) | "
                    f"{_g(b.safe)} | {proof} |"
                )
    return lines


def _overview() -> tuple[list[str], list[str]]:
    lines = [
        "| module | configuration | 2-norm gain | max-norm gain | forward | safe g, float16 | "
        "witness |",
        "|---|---|---|---|---|---|---|",
    ]
    missing = []
    known = models()
    for module, config in OVERVIEW.items():
        if module not in known:
            missing.append(module)
            continue
        e = envelope(module, "float16", **config)
        m = e.model

        def gain(g) -> str:
            if g.value is None:
                return "unbounded"
            return f"{float(g.value):.6g}" if g.tight else f"<= {float(g.value):.6g} (bound)"

        if m.forward.sup is not None:
            forward = f"<= {float(m.forward.sup):.6g}"
        else:
            at = e.forward_overflow_input
            forward = (
                "never overflows" if at is None else f"overflows from max abs x = {float(at):.6g}"
            )
        w = e.witness
        witness = "-" if w is None else f"inf at g = {float(w.outside):.6g}"
        lines.append(
            f"| {module} | {_cell(m.parameters)} | {gain(m.gain_2)} | {gain(m.gain_max)} | "
            f"{forward} | {_g(e.safe)} | {witness} |"
        )
    return lines, missing


def figure() -> str:
    """Safe float16 upstream-gradient size against eps (PyTorch convention)."""
    series = {}
    for module, dim in FIGURE_CURVES:
        points = []
        for eps in FIGURE_EPS:
            e = envelope(module, "float16", witness=False, dim=dim, eps=eps)
            points.append((eps, float(e.safe) if e.safe else 65504.0))
        label = {"layernorm": "LayerNorm D", "rmsnorm": "RMSNorm D", "batchnorm": "BatchNorm M"}
        series[f"{label[module]} = {dim}"] = points
    return loglog_figure(
        "largest safe float16 upstream gradient max|g| against eps",
        series,
        "eps (PyTorch convention)",
        "largest safe max|g|",
    )


#: The title and the rounding of each strict format's table.
_STRICT_TITLES = {
    "float16": ("Strict half arithmetic: where naive FP16 breaks", "half"),
    "bfloat16": ("Strict bfloat16 arithmetic: where naive bfloat16 breaks", "bfloat16"),
}


def _strict_lines(dtype: str) -> list[str]:
    title, rounding = _STRICT_TITLES[dtype]
    lines = [
        f"### {title}",
        "",
        "Predicted from the order of the strict kernels' operations (`strict_fp16=True`, every "
        f"intermediate rounded to {rounding}) and pinned on both sides by "
        "`tests/envelope/test_strict.py`.",
        "",
        "| module | D | eps | intermediate | threshold | what happens |",
        "|---|---|---|---|---|---|",
    ]
    rows: dict[tuple, list[str]] = {}
    for module in STRICT_MODULES:
        for dim in (768, 4096):
            for eps in (1e-5, 1e-12):
                for t in strict_thresholds(module, dim, eps, dtype):
                    key = (module, dim, t.quantity, t.parameter, t.threshold, t.statement)
                    rows.setdefault(key, []).append(f"{eps:g}")
    for (module, dim, quantity, parameter, threshold, statement), eps in rows.items():
        lines.append(
            f"| {module} | {dim} | {', '.join(eps)} | {quantity} | {parameter} = "
            f"{threshold:.6g} | {_cell(statement)} |"
        )
    return [*lines, ""]


def envelope_section() -> tuple[list[str], dict[str, str]]:
    """The section's lines and its figure (relative name -> SVG)."""
    example = envelope("layernorm", "float16", dim=4096, eps=1e-5)
    overview, missing = _overview()
    lines = [
        "## FP16 envelopes",
        "",
        "Principles 1 and 2 of the paper (section 4.2) ask that activations and gradients stay "
        "below the float range R. `liptable envelope MODULE ...` turns this into numbers. For a "
        "backward pass dx = J^T g, the 2-norm gain is the Lipschitz constant, "
        "sup_x sigma_max(J). What overflows, though, is one entry of dx. The gain that decides "
        "it is the max-norm gain sup_x max_j sum_i |J_ij|. The safe size is the largest format "
        "value g* such that no input and no upstream gradient with max|g_i| <= g* gives an "
        "exact dx entry of magnitude 65520 or more (65520 is where float16 rounding reaches "
        "inf). The witness is an input in the format, with a sign pattern s. At g = g* s the "
        "exact dx_j is finite. At the next float16 value it overflows, and the kernel returns "
        "inf there, in mixed mode. eps follows PyTorch (added to the variance). BatchNorm's "
        "D is the number of values normalized together per feature (N, or N H W).",
        "",
        "LayerNorm's max-norm gain is max|gamma| K(D)/sqrt(eps). K(D) = 2(D-1)/D, from a "
        "constant row, for D <= 57. From D = 58 on, a non-constant row gives more, and K(D) "
        "grows like sqrt(D/27). The closed form, its proof and the maximizing row are in "
        "`proofs/envelope.py` and `derive.envelope.modules.layernorm_k`. BatchNorm has the same "
        "constant with D = M. RMSNorm's K(D) is 1 for D <= 4 and (2/3)(1+c)sqrt((1+c)/(3c)) "
        "with c = (sqrt(D)-1)/2 above. So in float16 the backward pass of a D = 4096 "
        "LayerNorm with eps = 1e-5 overflows for some input once max|g| reaches "
        f"{float(example.witness.outside):.6g}. The 2-norm gain alone would suggest "
        f"65520/{float(example.model.gain_2.value):.6g} = "
        f"{65520 / float(example.model.gain_2.value):.4g}.",
        "",
        "```",
        "$ liptable envelope layernorm --dim 4096 --eps 1e-5",
        *example.lines(),
        "```",
        "",
        "### LayerNorm, RMSNorm and BatchNorm (|gamma| <= 1, beta = 0)",
        "",
        *_main_table(),
        "",
        f"![safe upstream gradient against eps]({FIGURE})",
        "",
        "### Every module (one configuration each)",
        "",
        *overview,
        "",
    ]
    if missing:
        lines += [f"No envelope yet for: {', '.join(missing)}.", ""]
    lines += _blocks_lines()
    lines += _strict_lines("float16") + _strict_lines("bfloat16")
    return lines, {FIGURE: figure(), BLOCKS_FIGURE: blocks_figure()}


#: The formats of the blocks table and figure.
BLOCK_FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
#: The blocks figure: a pre-LN MLP with |W_ij| <= 0.06 (three standard deviations of GPT-2's
#: initialization), gamma = 1, beta = 0, at these widths and eps.
BLOCKS_FIGURE = "figures/blocks_safe_loss_scale.svg"
BLOCKS_FIGURE_DIMS = (768, 4096)
BLOCKS_FIGURE_WEIGHT = 0.06


def _none_proven() -> str:
    """The figure's formats with no proven loss scale at any of its eps and widths (the
    safe size grows with eps, so the largest eps decides)."""
    empty = [
        fmt
        for fmt in BLOCK_FORMATS
        if all(
            block_envelope(
                "pre-ln-mlp",
                fmt,
                witness=False,
                dim=dim,
                eps=max(FIGURE_EPS),
                weight_max=BLOCKS_FIGURE_WEIGHT,
            ).safe
            == 0
            for dim in BLOCKS_FIGURE_DIMS
        )
    ]
    return f"; {', '.join(empty)} proves none at any eps shown" if empty else ""


def blocks_figure() -> str:
    """The proven safe loss scale of a pre-LN MLP block against eps, per format and D."""
    series = {}
    for fmt in BLOCK_FORMATS:
        for dim in BLOCKS_FIGURE_DIMS:
            points = []
            for eps in FIGURE_EPS:
                e = block_envelope(
                    "pre-ln-mlp",
                    fmt,
                    witness=False,
                    dim=dim,
                    eps=eps,
                    weight_max=BLOCKS_FIGURE_WEIGHT,
                )
                safe = e.format.max_finite if e.safe is None else e.safe
                points.append((eps, float(safe)))  # 0 (none proven) is left off the log axes
            series[f"{fmt}, D = {dim}"] = points
    return loglog_figure(
        "largest proven safe loss scale of a pre-LN MLP block against eps",
        series,
        "eps (PyTorch convention)",
        "largest safe max|g| at the block output",
    )


def _block_weights() -> dict[str, dict[str, np.ndarray]]:
    """Seeded weights: GPT-2 small's MLP and attention (one head of d = 768: its 12 heads
    folded into one, as the kernel takes them) drawn N(0, 0.02^2), the same with every row
    scaled to 2-norm 1, and a ResNet basic block's two 3x3 convolutions (64 channels,
    Kaiming-normal). LayerNorm and BatchNorm keep gamma = 1, beta = 0 (the bounds)."""
    rng = np.random.default_rng(0)
    d, hidden, channels = 768, 3072, 64
    gpt2 = {
        "attn.wq": rng.standard_normal((d, d)) * 0.02,
        "attn.wk": rng.standard_normal((d, d)) * 0.02,
        "attn.wv": rng.standard_normal((d, d)) * 0.02,
        "fc1.weight": rng.standard_normal((hidden, d)) * 0.02,
        "fc2.weight": rng.standard_normal((d, hidden)) * 0.02,
    }
    unit_rows = {
        k: v / np.array([[math.sqrt(math.fsum(row * row))] for row in v]) for k, v in gpt2.items()
    }
    std = math.sqrt(2 / (9 * channels))
    resnet = {
        f"conv{k}.weight": rng.standard_normal((channels, channels, 3, 3)) * std for k in (1, 2)
    }
    named = {"gpt2": gpt2, "unit": unit_rows, "resnet": resnet}
    return {name: frozen_weights(arrays) for name, arrays in named.items()}


#: Parameter draws of the Blocks table's witness search (four input spreads each).
BLOCK_WITNESS_ROUNDS = 1


def _block_witness(spec: str, config: dict, arrays: dict[str, np.ndarray] | None) -> str:
    """The realized gain at the block input (float64, the kernels' VJPs; evidence) and the
    float16 bound's ratio to it, or why there is none."""
    e = block_envelope(
        spec,
        "float16",
        weights=arrays,
        witness_rounds=BLOCK_WITNESS_ROUNDS,
        eps=1e-5,
        input_max=10.0,
        **config,
    )
    found = e.stages[0].witness_gain
    if found is None:  # "witness: not built (why)."
        return e.witness_note.removeprefix("witness: ").rstrip(".")
    return f"{found:.3g} (the float16 bound is {float(e.stages[0].gain) / found:.3g} times it)"


def _blocks_lines() -> list[str]:
    """The blocks table: the proven safe output gradient of each block in each format."""
    weights = _block_weights()
    gpt2 = {"dim": 768, "hidden": 3072, "tokens": 8}
    blocks = (
        (
            "pre-LN transformer, GPT-2 small (D = 768, 8 tokens, weights N(0, 0.02^2))",
            "pre-ln",
            gpt2,
            weights["gpt2"],
        ),
        ("the same, every weight row scaled to 2-norm 1", "pre-ln", gpt2, weights["unit"]),
        (
            "the same sizes, bounds only: every weight matrix of 2-norm at most 1",
            "pre-ln",
            gpt2 | {"weight_norm": 1.0},
            None,
        ),
        (
            "ResNet basic block, 64 channels (BatchNorm over M = 32 values per channel)",
            "resnet-basic",
            {"dim": 64, "batch": 32},
            weights["resnet"],
        ),
        (
            "the same, M = 32 x 56 x 56 = 100352 (BatchNorm2d at batch 32, 56 x 56 maps)",
            "resnet-basic",
            {"dim": 64, "batch": 32 * 56 * 56},
            weights["resnet"],
        ),
    )
    header = "| block | " + " | ".join(BLOCK_FORMATS) + " | witness gain (evidence) |"
    rows = [header, "|" + "---|" * (len(BLOCK_FORMATS) + 2)]
    for title, spec, config, arrays in blocks:
        cells = []
        for fmt in BLOCK_FORMATS:
            e = block_envelope(
                spec, fmt, weights=arrays, witness=False, eps=1e-5, input_max=10.0, **config
            )
            gain = f"gain {float(e.stages[0].gain):.3g}"
            overflow = (
                "; forward can overflow" if any(s.forward_overflows for s in e.stages) else ""
            )
            safe = "none proven" if e.safe == 0 else f"{float(e.safe):.3g}"
            cells.append(f"{safe} ({gain}{overflow})")
        cells.append(_block_witness(spec, config, arrays))
        rows.append(f"| {title} | " + " | ".join(cells) + " |")
    return [
        "### Blocks",
        "",
        "`liptable envelope --block SPEC` composes the envelopes above along a block: the "
        "max-norm gains multiply along the path, a residual adds 1 to its branch's gain, and "
        "every mixed-mode rounding adds a factor 1 + 2^-p (`derive/envelope/block.py`). "
        "A second chain multiplies the stages' 2-norm gains, with the same roundings; the "
        "given weights' 2-norms are bounded rigorously from powers of their Gram matrices "
        "(within a few percent; Hoelder's sqrt(||W||_1 ||W||_inf) overstates a 768 x 768 "
        "Gaussian matrix's 2-norm about twelvefold). Where every stage is token-wise or "
        "attention, sqrt(n) times the "
        "2-norm chain (n: the entries of the block's output, 8 x 768 for GPT-2) also bounds "
        "the max-norm gain, and the smaller bound goes on. DP attention gets gains for "
        "bounded inputs, from the bounds on its input's entries and token rows (its 2-norm "
        "gain: sqrt(N) s_v + s_q s_k s_v ||X||_F^2/sqrt(d), with s the weights' 2-norms). The "
        "table gives the largest block output gradient (loss scale) proven safe, for inputs "
        "with max|x| <= 10 and eps = 1e-5, and the block's gain. In every row the block "
        "input binds it. These are upper bounds, not suprema: the last column is the largest "
        "gain at the block input that a float64 witness search found (evidence: "
        f"{4 * BLOCK_WITNESS_ROUNDS} points, the kernels' VJPs at output gradients whose signs "
        "follow a column of the block Jacobian), and the command prints it per stage. For "
        "the transformer blocks what is left between bound and witness is LayerNorm's "
        "1/sqrt(eps) (reached only at near-constant rows), the attention's worst case over "
        "all inputs with the same row norms, and the factor sqrt(n) from the 2-norm to the "
        "max-norm.",
        "",
        *rows,
        "",
        "The figure: a pre-LN MLP block (LayerNorm, Linear D -> 4D, GeLU, Linear 4D -> D, "
        f"residual) with |W_ij| <= {BLOCKS_FIGURE_WEIGHT} (three standard deviations of "
        "GPT-2's initialization), gamma = 1 and beta = 0; eps follows PyTorch. Where no loss "
        "scale is proven the curve stops" + _none_proven() + ".",
        "",
        f"![safe loss scale of a pre-LN MLP block against eps]({BLOCKS_FIGURE})",
        "",
    ]
