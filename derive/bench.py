"""``liptable bench``: kernel speed against NumPy, and what a user waits for at first use.

Not a test: it prints numbers for the machine it runs on. For ``n`` float32 elements it
times forward + VJP of each activation kernel (best of 3, after a warm-up call that
compiles) against the equivalent vectorized NumPy expressions; then forward + VJP of the
row normalizations and BatchNorm (training mode) on (4096, 1024) float32 against NumPy;
then the time from a fresh interpreter to the first finished call of every activation
kernel with a cold and a warm Numba cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np


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


def _cases() -> list[tuple[str, Callable, Callable | None]]:
    from kernels import gelu, relu, sigmoid, swish

    def pair(module, **kw):
        return lambda x, g: (module.forward(x, **kw), module.vjp(x, g, **kw))

    return [
        ("sigmoid", pair(sigmoid), _numpy_sigmoid),
        ("relu", pair(relu), _numpy_relu),
        ("swish", pair(swish), _numpy_swish),
        ("gelu (none)", pair(gelu), None),
        ("gelu (tanh)", pair(gelu, approximate="tanh"), _numpy_gelu_tanh),
        ("gelu (sigmoid)", pair(gelu, approximate="sigmoid"), _numpy_gelu_sigmoid),
    ]


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


def _norm_cases() -> list[tuple[str, Callable, Callable]]:
    from kernels import batchnorm, centernorm, layernorm, rmsnorm

    def pair(module):
        return lambda x, g, gamma, beta: (
            module.forward(x, gamma, beta),
            module.vjp(x, g, gamma, beta),
        )

    return [
        ("layernorm", pair(layernorm), _numpy_layernorm),
        ("rmsnorm", pair(rmsnorm), _numpy_rmsnorm),
        ("centernorm", pair(centernorm), _numpy_centernorm),
        ("batchnorm", pair(batchnorm), _numpy_batchnorm),
    ]


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


def _conv_bench(rng: np.random.Generator) -> None:
    from kernels import conv2d

    shape, weight = (8, 64, 56, 56), (64, 64, 3, 3)
    x = rng.normal(size=shape).astype(np.float32)
    W = (rng.normal(size=weight) / 24).astype(np.float32)
    b = rng.normal(size=64).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)

    def ours():
        return conv2d.forward(x, W, b, 1, 1), conv2d.vjp(x, g, W, b, 1, 1)

    conv2d.vjp(x[:1, :, :8, :8], g[:1, :, :8, :8], W, b, 1, 1)  # compile
    mine = _best(ours)
    base = _best(lambda: _numpy_conv2d(x, g, W, b))
    print(f"conv2d forward + VJP, x {shape}, W {weight}, padding 1, float32, best of 3")
    print(f"{'conv2d':<16}{mine:>11.3f}s{base:>11.3f}s{base / mine:>8.2f}x  (NumPy im2col)")


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


def _attention_bench(rng: np.random.Generator) -> None:
    from kernels import dp_attention

    n, width = 512, 64
    X = rng.normal(size=(n, width)).astype(np.float32)
    G = rng.normal(size=(n, width)).astype(np.float32)
    Wq, Wk, Wv = (rng.normal(size=(width, width)).astype(np.float32) / 8 for _ in range(3))

    def ours():
        return dp_attention.forward(X, Wq, Wk, Wv), dp_attention.vjp(X, G, Wq, Wk, Wv)

    ours()
    mine = _best(ours)
    base = _best(lambda: _numpy_dp_attention(X, G, Wq, Wk, Wv))
    print(f"dp_attention forward + VJP, N = {n}, D = d = dv = {width}, float32, best of 3")
    print(f"{'dp_attention':<16}{mine:>11.4f}s{base:>11.4f}s{base / mine:>8.2f}x  (NumPy float32)")


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
    x = rng.normal(scale=3.0, size=n).astype(np.float32)
    g = rng.normal(size=n).astype(np.float32)
    print(f"forward + VJP, {n:,} float32 elements, best of 3 (threads: numba default)")
    print(f"{'module':<16}{'liptable':>12}{'numpy':>12}{'ratio':>9}")
    for name, ours, theirs in _cases():
        ours(x[:16], g[:16])
        mine = _best(lambda ours=ours: ours(x, g))
        if theirs is None:
            print(f"{name:<16}{mine:>11.3f}s{'(no erf)':>12}{'':>9}")
            continue
        base = _best(lambda theirs=theirs: theirs(x, g))
        print(f"{name:<16}{mine:>11.3f}s{base:>11.3f}s{base / mine:>8.2f}x")
    rows, size = 4096, 1024
    x = rng.normal(size=(rows, size)).astype(np.float32)
    g = rng.normal(size=(rows, size)).astype(np.float32)
    gamma = rng.normal(size=size).astype(np.float32)
    beta = rng.normal(size=size).astype(np.float32)
    print(f"forward + VJP (dx, dgamma, dbeta), ({rows}, {size}) float32, best of 3")
    print(f"{'module':<16}{'liptable':>12}{'numpy':>12}{'ratio':>9}")
    for name, ours, theirs in _norm_cases():
        ours(x[:2], g[:2], gamma, beta)
        mine = _best(lambda ours=ours: ours(x, g, gamma, beta))
        base = _best(lambda theirs=theirs: theirs(x, g, gamma, beta))
        print(f"{name:<16}{mine:>11.4f}s{base:>11.4f}s{base / mine:>8.2f}x")
    _conv_bench(rng)
    _attention_bench(rng)
    with tempfile.TemporaryDirectory() as cache:
        cold = first_use_seconds(cache)
        warm = first_use_seconds(cache)
    print(f"first use of every kernel (import + compile, float32): cold cache {cold:.1f} s,")
    print(f"warm cache {warm:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10**7)
