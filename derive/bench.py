"""``liptable bench``: kernel speed against NumPy, and what a user waits for at first use.

Not a test: it prints numbers for the machine it runs on. For every module of the catalog
(:data:`derive.catalog.CATALOG`, in its order) it times forward + VJP of the kernel, in
float32 at the module's benchmark shape (best of 3, after a warm-up call that compiles),
against a vectorized NumPy version of the same computation where one is written here
(:data:`BASELINES`); then the time from a fresh interpreter to the first finished call of
every activation kernel with a cold and a warm Numba cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import kernels
from derive.catalog import CATALOG, Module
from kernels import compose


def _numpy_sigmoid(x, g):
    y = 1 / (1 + np.exp(-x))
    return y, g * y * (1 - y)


def _numpy_relu(x, g):
    return np.maximum(x, 0), g * (x > 0)


def _numpy_swish(x, g):
    s = 1 / (1 + np.exp(-x))
    return x * s, g * (s + x * s * (1 - s))


def _numpy_gelu_tanh(x, g):
    c = np.float32(np.sqrt(2 / np.pi))
    u = c * (x + np.float32(0.044715) * x**3)
    t = np.tanh(u)
    du = c * (1 + np.float32(3 * 0.044715) * x * x)
    return x / 2 * (1 + t), g * ((1 + t) / 2 + x / 2 * (1 - t * t) * du)


def _numpy_gelu_sigmoid(x, g):
    s = 1 / (1 + np.exp(np.float32(-1.702) * x))
    return x * s, g * (s + np.float32(1.702) * x * s * (1 - s))


def _numpy_layernorm(x, g, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    d = x - mean
    r = 1 / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(eps))
    z = d * r
    a = gamma * g
    dx = r * (a - a.mean(-1, keepdims=True) - z * (a * z).mean(-1, keepdims=True))
    return gamma * z + beta, dx, (g * z).sum(0), g.sum(0)


def _numpy_rmsnorm(x, g, gamma, beta, eps=1e-6):
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(eps))
    z = x * r
    a = gamma * g
    dx = r * (a - z * (a * z).mean(-1, keepdims=True))
    return gamma * z + beta, dx, (g * z).sum(0), g.sum(0)


def _numpy_centernorm(x, g, gamma, beta):
    c = np.float32(x.shape[-1] / (x.shape[-1] - 1))
    d = x - x.mean(-1, keepdims=True)
    a = gamma * g
    return c * gamma * d + beta, c * (a - a.mean(-1, keepdims=True)), (g * c * d).sum(0), g.sum(0)


def _numpy_batchnorm(x, g, gamma, beta, eps=1e-5):
    mean = x.mean(0)
    d = x - mean
    r = 1 / np.sqrt((d * d).mean(0) + np.float32(eps))
    z = d * r
    a = gamma * g
    dx = r * (a - a.mean(0) - z * (a * z).mean(0))
    return gamma * z + beta, dx, (g * z).sum(0), g.sum(0)


def _numpy_conv2d(x, g, W, b, padding=1):
    """Conv2d forward + VJP by im2col in NumPy (stride 1, zero padding): the baseline."""
    n, c, h, w = x.shape
    o, _, k, _ = W.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    ho, wo = h + 2 * padding - k + 1, w + 2 * padding - k + 1
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * k * k)
    wmat = W.reshape(o, -1)
    y = (cols @ wmat.T + b).reshape(n, ho, wo, o).transpose(0, 3, 1, 2)
    gmat = g.transpose(0, 2, 3, 1).reshape(n * ho * wo, o)
    dW = (gmat.T @ cols).reshape(W.shape)
    db = gmat.sum(axis=0)
    dcols = (gmat @ wmat).reshape(n, ho, wo, c, k, k)
    dxp = np.zeros_like(xp)
    for a in range(k):
        for e in range(k):
            dxp[:, :, a : a + ho, e : e + wo] += dcols[:, :, :, :, a, e].transpose(0, 3, 1, 2)
    dx = dxp[:, :, padding : padding + h, padding : padding + w]
    return y, (dx, dW, db)


def _numpy_dp_attention(X, G, Wq, Wk, Wv):
    """Dot-product attention forward + backward in NumPy, in X's dtype: the baseline."""
    d = Wq.shape[0]
    Q, K, V = X @ Wq.T, X @ Wk.T, X @ Wv.T
    S = Q @ K.T / np.sqrt(d)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    Y = P @ V
    dV, dP = P.T @ G, G @ V.T
    dS = P * (dP - (dP * P).sum(axis=1, keepdims=True))
    dQ, dK = dS @ K / np.sqrt(d), dS.T @ Q / np.sqrt(d)
    return Y, (dQ @ Wq + dK @ Wk + dV @ Wv, dQ.T @ X, dK.T @ X, dV.T @ X)


def _numpy_softmax(x, g):
    e = np.exp(x - x.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    return y, y * (g - (g * y).sum(-1, keepdims=True))


def _numpy_linear(x, g, W, b):
    return x @ W.T + b, (g @ W, g.T @ x, g.sum(0))


def _numpy_pool2(x, g, kind):
    """2 x 2 windows, stride 2, on an NCHW image with even sides."""
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // 2, 2, w // 2, 2)
    if kind == "avg":
        y = blocks.mean(axis=(3, 5))
        dx = np.repeat(np.repeat(g / 4, 2, axis=2), 2, axis=3)
        return y, dx
    y = blocks.max(axis=(3, 5))
    first = blocks == y[:, :, :, None, :, None]  # ties: NumPy's way, not PyTorch's
    return y, first * g[:, :, :, None, :, None]


def _numpy_residual(x, g, W1, b1, W2, b2):
    h = x @ W1.T + b1
    a = np.maximum(h, 0)
    y = x + a @ W2.T + b2
    dh = (g @ W2) * (h > 0)
    return y, g + dh @ W1


@dataclass(frozen=True)
class Case:
    """One benchmark: the kernel's forward + VJP and the NumPy baseline on the same data
    (None: no NumPy version is written here), with a description of the shape."""

    shape: str
    ours: Callable[[], object]
    baseline: Callable[[], object] | None
    warm_up: Callable[[], object]


def _pair(module, *args, **kw):
    def run(x, g):
        return module.forward(x, *args, **kw), module.vjp(x, g, *args, **kw)

    return run


def _elementwise_case(m: Module, rng: np.random.Generator, n: int) -> list[tuple[str, Case]]:
    x = rng.normal(scale=3.0, size=n).astype(np.float32)
    g = rng.normal(size=n).astype(np.float32)
    module = getattr(kernels, m.key)
    variants = m.variants or ("",)
    numpy = {
        "sigmoid": _numpy_sigmoid,
        "relu": _numpy_relu,
        "swish": _numpy_swish,
        "gelu (tanh)": _numpy_gelu_tanh,
        "gelu (sigmoid)": _numpy_gelu_sigmoid,
    }
    cases = []
    for variant in variants:
        name = f"{m.key} ({variant})" if variant else m.key
        run = _pair(module, variant) if variant else _pair(module)
        base = numpy.get(name)
        cases.append(
            (
                name,
                Case(
                    f"{n:,} elements",
                    lambda run=run: run(x, g),
                    None if base is None else (lambda base=base: base(x, g)),
                    lambda run=run: run(x[:16], g[:16]),
                ),
            )
        )
    return cases


def _rows_case(m: Module, rng: np.random.Generator) -> Case:
    rows, size = 4096, 1024
    x = rng.normal(size=(rows, size)).astype(np.float32)
    g = rng.normal(size=(rows, size)).astype(np.float32)
    gamma = rng.normal(size=size).astype(np.float32)
    beta = rng.normal(size=size).astype(np.float32)
    module = getattr(kernels, m.key)
    if m.key == "softmax":
        return Case(
            f"({rows}, {size})",
            lambda: _pair(module)(x, g),
            lambda: _numpy_softmax(x, g),
            lambda: _pair(module)(x[:2], g[:2]),
        )
    if m.key == "weightnorm":
        v = rng.normal(size=(size, size)).astype(np.float32)
        return Case(
            f"({rows}, {size}) -> {size}",
            lambda: _pair(module, v, gamma)(x, g),
            None,
            lambda: _pair(module, v, gamma)(x[:2], g[:2]),
        )
    numpy = {
        "layernorm": _numpy_layernorm,
        "rmsnorm": _numpy_rmsnorm,
        "centernorm": _numpy_centernorm,
        "batchnorm": _numpy_batchnorm,
    }[m.key]
    run = _pair(module, gamma, beta)
    return Case(
        f"({rows}, {size})",
        lambda: run(x, g),
        lambda: numpy(x, g, gamma, beta),
        lambda: run(x[:2], g[:2]),
    )


def _linear_case(m: Module, rng: np.random.Generator) -> Case:
    x = rng.normal(size=(4096, 1024)).astype(np.float32)
    g = rng.normal(size=(4096, 1024)).astype(np.float32)
    W = (rng.normal(size=(1024, 1024)) / 32).astype(np.float32)
    b = rng.normal(size=1024).astype(np.float32)
    run = _pair(kernels.linear, W, b)
    return Case(
        "(4096, 1024) -> 1024",
        lambda: run(x, g),
        lambda: _numpy_linear(x, g, W, b),
        lambda: run(x[:2], g[:2]),
    )


def _conv2d_case(m: Module, rng: np.random.Generator) -> Case:
    shape, weight = (8, 64, 56, 56), (64, 64, 3, 3)
    x = rng.normal(size=shape).astype(np.float32)
    W = (rng.normal(size=weight) / 24).astype(np.float32)
    b = rng.normal(size=64).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    run = _pair(kernels.conv2d, W, b, 1, 1)
    return Case(
        f"x {shape}, W {weight}, padding 1",
        lambda: run(x, g),
        lambda: _numpy_conv2d(x, g, W, b),
        lambda: run(x[:1, :, :8, :8], g[:1, :, :8, :8]),
    )


def _pool_case(m: Module, rng: np.random.Generator) -> Case:
    shape = (8, 64, 56, 56)
    x = rng.normal(size=shape).astype(np.float32)
    g = rng.normal(size=(8, 64, 28, 28)).astype(np.float32)
    module = getattr(kernels, m.key)

    def run(x, g):
        return module.forward2d(x, 2), module.vjp2d(x, g, 2)

    kind = "max" if m.key == "maxpool" else "avg"
    return Case(
        f"{shape}, 2 x 2 windows",
        lambda: run(x, g),
        lambda: _numpy_pool2(x, g, kind),
        lambda: run(x[:1, :1, :4, :4], g[:1, :1, :2, :2]),
    )


def _attention_case(m: Module, rng: np.random.Generator) -> Case:
    n, width = 512, 64
    X = rng.normal(size=(n, width)).astype(np.float32)
    G = rng.normal(size=(n, width)).astype(np.float32)
    Wq, Wk, Wv = (rng.normal(size=(width, width)).astype(np.float32) / 8 for _ in range(3))
    params = {
        "dp_attention": (Wq, Wk, Wv),
        "l2_attention": (Wq, Wv),
        "scs_attention": (Wq, Wk, Wv, 1.0, 1.0, 1e-6),
    }[m.key]
    run = _pair(getattr(kernels, m.key), *params)
    base = (lambda: _numpy_dp_attention(X, G, Wq, Wk, Wv)) if m.key == "dp_attention" else None
    return Case(
        f"N = {n}, D = d = dv = {width}", lambda: run(X, G), base, lambda: run(X[:4], G[:4])
    )


def _residual_case(m: Module, rng: np.random.Generator) -> Case:
    rows, size, hidden = 4096, 256, 1024
    x = rng.normal(size=(rows, size)).astype(np.float32)
    g = rng.normal(size=(rows, size)).astype(np.float32)
    W1 = (rng.normal(size=(hidden, size)) / 16).astype(np.float32)
    W2 = (rng.normal(size=(size, hidden)) / 32).astype(np.float32)
    b1, b2 = np.zeros(hidden, np.float32), np.zeros(size, np.float32)
    branch = compose.ffn(W1, b1, W2, b2)
    extra = (np.full(size, 0.5, np.float32),) if m.key == "weighted_residual" else ()
    run = _pair(getattr(kernels, m.key), branch, *extra)
    base = (lambda: _numpy_residual(x, g, W1, b1, W2, b2)) if m.key == "residual" else None
    return Case(
        f"({rows}, {size}), FFN hidden {hidden}", lambda: run(x, g), base, lambda: run(x[:2], g[:2])
    )


#: How each benchmark shape family (``Module.bench``) builds its cases.
BUILDERS: dict[str, Callable[[Module, np.random.Generator], Case]] = {
    "rows": _rows_case,
    "linear": _linear_case,
    "conv2d": _conv2d_case,
    "pool": _pool_case,
    "attention": _attention_case,
    "residual": _residual_case,
}


def cases(n: int, rng: np.random.Generator) -> list[tuple[str, Case]]:
    """Every catalog module's benchmark, in the catalog's order."""
    out = []
    for m in CATALOG:
        if m.bench == "elementwise":
            out += _elementwise_case(m, rng, n)
        else:
            out.append((m.key, BUILDERS[m.bench](m, rng)))
    return out


def _best(run: Callable[[], object], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


FIRST_USE = """
import time, numpy as np
start = time.perf_counter()
from kernels import gelu, relu, sigmoid, swish
x = np.linspace(-3, 3, 16, dtype=np.float32)
for m in (sigmoid, relu, swish):
    m.forward(x); m.vjp(x, x)
for a in ("none", "tanh", "sigmoid"):
    gelu.forward(x, a); gelu.vjp(x, x, a)
print(time.perf_counter() - start)
"""


def first_use_seconds(cache_dir: str) -> float:
    """Seconds from ``import kernels`` to the end of the first float32 forward + VJP of
    every activation, in a fresh interpreter whose Numba cache lives in ``cache_dir``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE], env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def main(n: int = 10**7) -> None:
    rng = np.random.default_rng(0)
    print("forward + VJP, float32, best of 3 (threads: numba default); ratio = NumPy / liptable")
    print(f"{'module':<20}{'shape':<40}{'liptable':>11}{'numpy':>11}{'ratio':>8}")
    for name, case in cases(n, rng):
        case.warm_up()
        mine = _best(case.ours)
        if case.baseline is None:
            print(f"{name:<20}{case.shape:<40}{mine:>10.4f}s{'-':>11}{'':>8}")
            continue
        base = _best(case.baseline)
        print(f"{name:<20}{case.shape:<40}{mine:>10.4f}s{base:>10.4f}s{base / mine:>7.2f}x")
    with tempfile.TemporaryDirectory() as cache:
        cold = first_use_seconds(cache)
        warm = first_use_seconds(cache)
    print(f"first use of every activation (import + compile, float32): cold cache {cold:.1f} s,")
    print(f"warm cache {warm:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10**7)
