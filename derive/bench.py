"""``liptable bench``: kernel speed against the alternative a user has, and first-use time.

Not a test: it prints numbers for the machine it runs on. For every module of the catalog
(:data:`derive.catalog.CATALOG`, in its order; GeLU once per variant) it times the kernel's
forward + VJP on the module's benchmark problem against the same computation in NumPy
(``--against numpy``, the default, where a NumPy version is written here) or in PyTorch
(``--against torch``: forward + ``backward()``, PyTorch being the optional ``bench``
extra). The two run interleaved, warm (a first call compiles), and the median of the
passes is printed with the ratio alternative / liptable (above 1: liptable is faster).

For the memory-bound modules it also prints the achieved fraction of this machine's DRAM
bandwidth, measured in the same run by a STREAM-like triad ``a = b + s c`` over arrays far
larger than the caches; the traffic of a module is the bytes its API calls must read and
write at least (forward: inputs and output; VJP: inputs, upstream gradient and
gradients), so the fraction is a lower bound on what the kernel moves.

For the GEMM-bound modules (linear, weightnorm, conv2d, the attentions, the residual
blocks) it prints the achieved fraction of this machine's float64 matrix-product rate,
measured in the same run: NumPy's float64 matmul of 4096 x 1024 by 1024 x 1024, printed
once as the best of a few (:func:`dgemm_rate`) and timed again in every pass of each
GEMM-bound row, next to the module, whose median rate the fraction divides by (on a shared
machine the load changes from row to row; module and GEMM see the same). A module's flops
are those of the matrix products its two API calls must compute at least, ``2 m k n`` for
an (m, k) by (k, n) product, counted by :func:`_gemm` in each family's builder: the
forward's products, and the VJP's backward products plus the forward products it needs
again (the VJP gets ``x``, not the forward's intermediates). The attentions' ``N^2 d``
loops (L2's distances and weighted differences) count as the products they replace.
Elementwise work is not counted, so the fraction is a lower bound on how busy the kernel
keeps the multipliers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import numpy as np
from numba import njit, prange

import kernels
from derive.catalog import CATALOG, Module
from derive.progress import clear, show
from kernels import compose

#: The benchmark shapes of the row-wise families (rows, last axis reduced).
ROW_SHAPES: tuple[tuple[int, int], ...] = ((4096, 1024), (256, 4096))
#: Families whose kernels are bound by memory traffic, not arithmetic.
MEMORY_BOUND = ("elementwise", "rows", "pool")
#: The float64 matrix product timed for the GEMM rate: (m, k) by (k, n).
DGEMM_SHAPE = (4096, 1024, 1024)

#: Seconds each side of an interleaved pass runs untimed before its timed call. Thread
#: pools spin for tens of milliseconds after their work (PyTorch's, OpenBLAS's, Numba's),
#: and on two cores whatever runs next loses a core to them: measured, dp_attention
#: (N = 512) forward + VJP took 11 ms alone, 19 ms right after PyTorch's forward +
#: backward. A pause instead lets the pools go to sleep, and waking them costs too
#: (LayerNorm at (256, 4096): 2.3 ms back to back, 12.3 ms after a 50 ms sleep).
SETTLE = 0.05


#: glibc's mallopt parameters (malloc.h): the heap's trim threshold, and the size from
#: which a block is mapped from the kernel on its own (and unmapped when freed).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: The largest mmap threshold glibc accepts on 64-bit systems (its DEFAULT_MMAP_THRESHOLD_MAX).
KEEP_BELOW = 32 << 20


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep the memory the process frees: blocks below
    :data:`KEEP_BELOW` come from its heap, which is never trimmed. True if it agreed.

    By default glibc maps every large block fresh from the kernel and unmaps it when freed
    (or trims the heap), so a call that allocates a 16 MB result touches 4,096 new pages.
    In this virtual machine a new page costs about 4 us (16 MB of fresh anonymous memory:
    16.5 ms to touch), and which side of an interleaved pass pays it depends on the
    allocator's state: PyTorch's LayerNorm at (4096, 1024) took 8.4 and 12.7 ms in two runs
    with the defaults, 3.9 and 3.8 ms with freed memory kept. Both sides allocate through
    the same malloc, so keeping freed memory times the kernels, not the page faults.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):  # no C library found, or not glibc's
        return False
    kept = mallopt(_M_MMAP_THRESHOLD, KEEP_BELOW) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    return bool(kept)


@dataclass(frozen=True)
class Problem:
    """One module's benchmark input: ``forward(x, *params, **options)`` and
    ``vjp(x, g, *params, **options)`` (or their ``2d`` forms for windowed pooling)."""

    name: str
    shape: str
    module: ModuleType
    x: np.ndarray
    g: np.ndarray
    params: tuple = ()
    options: dict = field(default_factory=dict)
    windowed: bool = False
    memory_bound: bool = False
    #: Flops of the matrix products forward + VJP must compute at least (0: not GEMM-bound).
    flops: int = 0

    def run(self, x: np.ndarray | None = None, g: np.ndarray | None = None) -> tuple[Any, Any]:
        x = self.x if x is None else x
        g = self.g if g is None else g
        forward = self.module.forward2d if self.windowed else self.module.forward
        vjp = self.module.vjp2d if self.windowed else self.module.vjp
        return forward(x, *self.params, **self.options), vjp(x, g, *self.params, **self.options)

    def small(self) -> Problem:
        """The same problem on a small slice of the data."""
        if self.windowed:
            x, g = self.x[:1, :1, :4, :4], self.g[:1, :1, :2, :2]
        elif self.module is kernels.conv2d:
            x, g = self.x[:1, :, :8, :8], self.g[:1, :, :8, :8]
        else:
            x, g = self.x[:4], self.g[:4]
        return replace(self, x=np.ascontiguousarray(x), g=np.ascontiguousarray(g))

    def warm_up(self) -> tuple[Any, Any]:
        """A call on a small slice of the data (compiles the loops)."""
        return self.small().run()

    def traffic(self, outputs: tuple[Any, Any]) -> int:
        """Bytes the two API calls read and write at least."""

        def size(value: Any) -> int:
            if isinstance(value, np.ndarray):
                return value.nbytes
            if isinstance(value, (tuple, list)):
                return sum(size(v) for v in value)
            return 0

        inputs = size(self.x) + size(self.params)
        return 2 * inputs + size(self.g) + size(outputs[0]) + size(outputs[1])


def _gemm(m: int, k: int, n: int) -> int:
    """Flops of an (m, k) by (k, n) matrix product: m n dot products of length k."""
    return 2 * m * k * n


def _rng_array(rng: np.random.Generator, shape, dtype, scale: float = 1.0) -> np.ndarray:
    return (rng.normal(size=shape) * scale).astype(dtype)


def _elementwise(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    x, g = _rng_array(rng, shape, dtype, 3.0), _rng_array(rng, shape, dtype)
    module = getattr(kernels, m.key)
    for variant in m.variants or ("",):
        name = f"{m.key} ({variant})" if variant else m.key
        params = (variant,) if variant else ()
        yield Problem(name, str(shape), module, x, g, params, memory_bound=True)


def _rows(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    rows, size = shape
    x, g = _rng_array(rng, shape, dtype), _rng_array(rng, shape, dtype)
    gamma, beta = _rng_array(rng, size, dtype), _rng_array(rng, size, dtype)
    module = getattr(kernels, m.key)
    if m.key == "softmax":
        yield Problem(m.key, str(shape), module, x, g, memory_bound=True)
    elif m.key == "weightnorm":
        out = 1024
        v, gam = _rng_array(rng, (out, size), dtype), _rng_array(rng, out, dtype)
        gy = _rng_array(rng, (rows, out), dtype)
        flops = 3 * _gemm(rows, size, out)  # y = x W^T, dx = g W, dW = g^T x
        yield Problem(m.key, f"{shape} -> {out}", module, x, gy, (v, gam), flops=flops)
    else:
        yield Problem(m.key, str(shape), module, x, g, (gamma, beta), memory_bound=True)


def _linear(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    x, g = _rng_array(rng, (4096, 1024), dtype), _rng_array(rng, (4096, 1024), dtype)
    W, b = _rng_array(rng, (1024, 1024), dtype, 1 / 32), _rng_array(rng, 1024, dtype)
    flops = 3 * _gemm(4096, 1024, 1024)  # y = x W^T, dx = g W, dW = g^T x
    yield Problem(m.key, "(4096, 1024) -> 1024", kernels.linear, x, g, (W, b), flops=flops)


def _conv2d(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    x, g = _rng_array(rng, (8, 64, 56, 56), dtype), _rng_array(rng, (8, 64, 56, 56), dtype)
    W, b = _rng_array(rng, (64, 64, 3, 3), dtype, 1 / 24), _rng_array(rng, 64, dtype)
    text = "(8, 64, 56, 56), 64 3x3 filters, padding 1"
    # y, dW and dx: each an (O, C Kh Kw) by (C Kh Kw, N Ho Wo) product (Ho = Wo = 56)
    flops = 3 * _gemm(64, 64 * 3 * 3, 8 * 56 * 56)
    yield Problem(m.key, text, kernels.conv2d, x, g, (W, b, 1, 1), flops=flops)


def _pool(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    x, g = _rng_array(rng, (8, 64, 56, 56), dtype), _rng_array(rng, (8, 64, 28, 28), dtype)
    module = getattr(kernels, m.key)
    text = "(8, 64, 56, 56), 2x2 windows"
    yield Problem(m.key, text, module, x, g, (2,), windowed=True, memory_bound=True)


def _attention(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    n, width = 512, 64
    X, G = _rng_array(rng, (n, width), dtype), _rng_array(rng, (n, width), dtype)
    Wq, Wk, Wv = (_rng_array(rng, (width, width), dtype, 1 / 8) for _ in range(3))
    params = {
        "dp_attention": (Wq, Wk, Wv),
        "l2_attention": (Wq, Wv),
        "scs_attention": (Wq, Wk, Wv, 1.0, 1.0, 1e-6),
    }[m.key]
    flops = _attention_flops(m.key, n, width, width, width)
    text = f"N = {n}, D = {width}"
    yield Problem(m.key, text, getattr(kernels, m.key), X, G, params, flops=flops)


def _attention_flops(key: str, n: int, D: int, d: int, dv: int) -> int:
    """Matrix-product flops of an attention's forward + VJP (X (n, D), d = rows of Wq,
    dv = rows of Wv); the VJP recomputes the forward products it needs."""
    if key == "l2_attention":
        # Q = X Wq^T, S from the distances, A = Wq^T Wq, B = A Wv^T, M = X B
        needed = _gemm(n, D, d) + _gemm(n, d, n) + _gemm(D, d, D) + _gemm(D, D, dv)
        needed += _gemm(n, D, dv)
        forward = needed + _gemm(n, n, dv)  # Y = P M
        # dM = P^T G, dP = G M^T, dQ (weighted differences), dX = dQ Wq + dM B^T,
        # dB = X^T dM, F = Wv^T dB^T, dWq = dQ^T X + Wq (F + F^T), dWv = dB^T A
        backward = 2 * _gemm(n, n, dv) + _gemm(n, n, d) + _gemm(n, d, D) + _gemm(n, dv, D)
        backward += _gemm(D, n, dv) + _gemm(D, dv, D) + _gemm(d, n, D) + _gemm(d, D, D)
        backward += _gemm(dv, D, D)
        return forward + needed + backward
    # dp and scs: Q, K, V = X W^T, S = Q K^T (P needs it), Y = P V
    needed = _gemm(n, D, 2 * d + dv) + _gemm(n, d, n)
    forward = needed + _gemm(n, n, dv)
    # dV = P^T G, dP = G V^T, dQ = dS K, dK = dS^T Q, dX = sum dQ W, dW = dQ^T X (x3)
    backward = 2 * _gemm(n, n, dv) + 2 * _gemm(n, n, d) + 2 * _gemm(n, D, 2 * d + dv)
    return forward + needed + backward


def _residual(m: Module, rng, dtype, shape) -> Iterator[Problem]:
    rows, size, hidden = 4096, 256, 1024
    x, g = _rng_array(rng, (rows, size), dtype), _rng_array(rng, (rows, size), dtype)
    W1, W2 = (
        _rng_array(rng, (hidden, size), dtype, 1 / 16),
        _rng_array(rng, (size, hidden), dtype, 1 / 32),
    )
    branch = compose.ffn(W1, np.zeros(hidden, dtype), W2, np.zeros(size, dtype))
    extra = (np.full(size, 0.5, dtype),) if m.key == "weighted_residual" else ()
    text = f"({rows}, {size}), FFN hidden {hidden}"
    # forward: two products; VJP: the first again (for the ReLU's mask), then dx and dW of
    # each Linear; the weighted block's dnu = sum g f(x) needs the second product again too
    flops = 7 * _gemm(rows, size, hidden)
    if m.key == "weighted_residual":
        flops += _gemm(rows, hidden, size)
    module = getattr(kernels, m.key)
    yield Problem(m.key, text, module, x, g, (branch, *extra), flops=flops)


#: How each benchmark family (``Module.bench``) builds its problems.
BUILDERS: dict[str, Callable[..., Iterator[Problem]]] = {
    "elementwise": _elementwise,
    "rows": _rows,
    "linear": _linear,
    "conv2d": _conv2d,
    "pool": _pool,
    "attention": _attention,
    "residual": _residual,
}


def problems(
    dtype: Any = np.float32, seed: int = 0, modules: tuple[str, ...] = ()
) -> list[Problem]:
    """Every catalog module's benchmark problems in ``dtype``, in the catalog's order; the
    elementwise and row families at each of :data:`ROW_SHAPES`. ``modules``: only these
    catalog keys (all if empty); a module's data is the same either way, since every
    module's arrays are drawn from ``seed`` in the same order."""
    unknown = sorted(set(modules) - {m.key for m in CATALOG})
    if unknown:
        raise ValueError(f"no catalog module {', '.join(unknown)}")
    rng = np.random.default_rng(seed)
    out = []
    for shape in ROW_SHAPES:
        for m in CATALOG:
            if m.bench in ("elementwise", "rows") or shape == ROW_SHAPES[0]:
                built = BUILDERS[m.bench](m, rng, np.dtype(dtype), shape)
                out += [p for p in built if not modules or m.key in modules]
    return out


# --- the alternatives ----------------------------------------------------------------------


def _numpy_baseline(p: Problem) -> Callable[[], object] | None:
    """The same forward + VJP in vectorized NumPy, in the problem's dtype (None: not
    written here)."""
    x, g = p.x, p.g
    name = p.name
    if name in ("sigmoid", "swish", "gelu (sigmoid)"):
        slope = {"sigmoid": None, "swish": 1.0, "gelu (sigmoid)": 1.702}[name]

        def run():
            s = 1 / (1 + np.exp(-x if slope is None else -slope * x))
            if slope is None:
                return s, g * s * (1 - s)
            return x * s, g * (s + slope * x * s * (1 - s))

        return run
    if name == "relu":
        return lambda: (np.maximum(x, 0), g * (x > 0))
    if name == "softmax":

        def run():
            e = np.exp(x - x.max(-1, keepdims=True))
            y = e / e.sum(-1, keepdims=True)
            return y, y * (g - (g * y).sum(-1, keepdims=True))

        return run
    if name in ("layernorm", "rmsnorm", "batchnorm"):
        gamma, beta = p.params
        axis = 0 if name == "batchnorm" else -1
        eps = 1e-6 if name == "rmsnorm" else 1e-5

        def run():
            d = x if name == "rmsnorm" else x - x.mean(axis, keepdims=True)
            r = 1 / np.sqrt((d * d).mean(axis, keepdims=True) + eps)
            z = d * r
            a = gamma * g
            mean_a = 0 if name == "rmsnorm" else a.mean(axis, keepdims=True)
            dx = r * (a - mean_a - z * (a * z).mean(axis, keepdims=True))
            return gamma * z + beta, (dx, (g * z).sum(0), g.sum(0))

        return run
    if name == "linear":
        W, b = p.params
        return lambda: (x @ W.T + b, (g @ W, g.T @ x, g.sum(0)))
    return None


def _torch_baseline(p: Problem, torch: Any) -> Callable[[], object] | None:
    """The same forward + ``backward()`` in PyTorch, gradients for every array input."""
    F = torch.nn.functional
    tensors = [
        torch.from_numpy(np.ascontiguousarray(a))
        for a in (p.x, *p.params)
        if isinstance(a, np.ndarray)
    ]
    g = torch.from_numpy(p.g)
    name, key = p.name, p.name.split(" ")[0]
    D = p.x.shape[-1]

    def forward(x, *w):
        if key in ("sigmoid", "relu"):
            return getattr(torch, key)(x)
        if key == "swish":
            return F.silu(x)
        if name == "gelu (sigmoid)":
            return x * torch.sigmoid(1.702 * x)
        if key == "gelu":
            return F.gelu(x, approximate="tanh" if "tanh" in name else "none")
        if key == "softmax":
            return torch.softmax(x, -1)
        if key == "layernorm":
            return F.layer_norm(x, (D,), w[0], w[1], 1e-5)
        if key == "rmsnorm":
            return F.rms_norm(x, (D,), w[0], 1e-6) + w[1]
        if key == "centernorm":
            return D / (D - 1) * w[0] * (x - x.mean(-1, keepdim=True)) + w[1]
        if key == "batchnorm":
            return F.batch_norm(x, None, None, w[0], w[1], training=True, eps=1e-5)
        if key == "weightnorm":
            v, gamma = w
            W = gamma[:, None] * v / torch.sqrt((v * v).sum(1, keepdim=True))
            return x @ W.T
        if key == "linear":
            return F.linear(x, w[0], w[1])
        if key == "conv2d":
            return F.conv2d(x, w[0], w[1], stride=1, padding=1)
        if key == "maxpool":
            return F.max_pool2d(x, 2)
        if key == "avgpool":
            return F.avg_pool2d(x, 2)
        if key == "dp_attention":
            Q, K, V = x @ w[0].T, x @ w[1].T, x @ w[2].T
            return torch.softmax(Q @ K.T / w[0].shape[0] ** 0.5, -1) @ V
        if key == "l2_attention":
            Q = x @ w[0].T
            d = w[0].shape[0]
            P = torch.softmax(-(torch.cdist(Q, Q) ** 2) / d**0.5, -1)
            return P @ x @ (w[0].T @ w[0] / d**0.5) @ w[1].T
        if key == "scs_attention":

            def unit(t):
                return t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)

            Q, K, V = (unit(x @ W.T) for W in w)
            return torch.softmax(Q @ K.T, -1) @ V
        if key in ("residual", "weighted_residual"):
            branch = p.params[0]
            W1, W2 = branch.stages[0].W, branch.stages[2].W
            f = F.relu(x @ torch.from_numpy(W1).T) @ torch.from_numpy(W2).T
            return x + (0.5 * f if key == "weighted_residual" else f)
        return None

    def run():
        inputs = [t.detach().requires_grad_() for t in tensors]
        y = forward(*inputs)
        y.backward(g)
        return y, [t.grad for t in inputs]

    try:
        run()
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return None
    return run


# --- timing --------------------------------------------------------------------------------


def _interleaved(
    ours: Callable[[], object],
    theirs: Callable[[], object] | None,
    passes: int,
    reference: Callable[[], object] | None = None,
    settle: float = SETTLE,
) -> tuple[float, float | None, float | None]:
    """Medians of ``passes`` alternating timings of the two (both called once before), and
    of ``reference`` (the float64 GEMM of :func:`dgemm_rate`) timed in the same passes.

    The two take turns at going first, and each is timed after :data:`SETTLE` seconds of
    running untimed (:func:`_timed`), so that neither is timed while the other's worker
    threads are still spinning, competing for the cores.
    """
    mine, base, ref = [], [], []
    for index in range(passes):
        if theirs is not None and index % 2:
            base.append(_timed(theirs, settle))
        mine.append(_timed(ours, settle))
        if theirs is not None and not index % 2:
            base.append(_timed(theirs, settle))
        if reference is not None:
            ref.append(_timed(reference, settle))
    return (
        statistics.median(mine),
        statistics.median(base) if base else None,
        statistics.median(ref) if ref else None,
    )


@njit(parallel=True, cache=True)
def _triad(a, b, c, s):  # pragma: no cover - timed, not tested
    for i in prange(a.shape[0]):
        a[i] = b[i] + s * c[i]


def dram_bandwidth(n: int = 1 << 25, passes: int = 7) -> float:
    """Bytes per second of the triad ``a = b + s c`` over three float64 arrays of ``n``
    entries (768 MiB at the default), best of ``passes``."""
    a, b, c = np.empty(n), np.ones(n), np.ones(n)
    _triad(a, b, c, 3.0)
    best = min(_timed(lambda: _triad(a, b, c, 3.0)) for _ in range(passes))
    return 3 * 8 * n / best


def _dgemm(shape: tuple[int, int, int] = DGEMM_SHAPE) -> Callable[[], object]:
    """The timed float64 product: ``np.matmul(a, b, out=c)`` on (m, k) and (k, n) arrays."""
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.random((m, k)), rng.random((k, n))
    out = np.empty((m, n))
    return lambda: np.matmul(a, b, out=out)


def dgemm_rate(shape: tuple[int, int, int] = DGEMM_SHAPE, passes: int = 5) -> float:
    """Flops per second of NumPy's float64 matmul of an (m, k) by (k, n) product
    (:data:`DGEMM_SHAPE` by default), best of ``passes`` after one warm-up call."""
    run = _dgemm(shape)
    run()
    return _gemm(*shape) / min(_timed(run) for _ in range(passes))


def _timed(run: Callable[[], object], settle: float = 0.0) -> float:
    """Seconds of one call of ``run``, after calling it untimed for ``settle`` seconds (at
    least once, if ``settle`` > 0)."""
    if settle > 0:
        deadline = time.perf_counter() + settle
        run()
        while time.perf_counter() < deadline:
            run()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


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


def main(
    against: str = "numpy",
    dtypes: tuple[str, ...] = ("float32",),
    passes: int = 7,
    first_use: bool = True,
    modules: tuple[str, ...] = (),
) -> None:
    """Print the table for each dtype; ``against`` is ``"numpy"`` or ``"torch"``;
    ``modules``: only these catalog keys (all if empty)."""
    torch = None
    if against == "torch":
        try:
            import torch
        except ImportError:
            raise SystemExit(
                "liptable bench --against torch: PyTorch is not installed "
                "(pip install -e '.[bench]')"
            ) from None
        print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads")
    if keep_freed_memory():
        print(f"memory: freed blocks below {KEEP_BELOW >> 20} MB stay in the process (mallopt)")
    else:
        print("memory: the allocator's defaults (no glibc mallopt here)")
    bandwidth = dram_bandwidth()
    print(f"DRAM bandwidth (triad a = b + s c, float64): {bandwidth / 1e9:.1f} GB/s")
    rate = dgemm_rate()
    gemm = _dgemm()
    m, k, n = DGEMM_SHAPE
    print(f"float64 GEMM rate (NumPy matmul, {m}x{k} by {k}x{n}): {rate / 1e9:.1f} GFLOP/s")
    ratios = {}
    for dtype in dtypes:
        print(
            f"\nforward + VJP, {dtype}, median of {passes} interleaved passes, each timed "
            f"after {SETTLE * 1000:.0f} ms of untimed calls; "
            f"ratio = {against} / liptable (above 1: liptable is faster)"
        )
        print(
            f"{'module':<18}{'shape':<42}{'liptable ms':>12}{against + ' ms':>11}"
            f"{'ratio':>8}{'DRAM':>7}{'dgemm':>7}"
        )
        for p in problems(dtype, modules=modules):
            show(f"{dtype} {p.name} {p.shape}")
            p.warm_up()
            outputs = p.run()
            theirs = _torch_baseline(p, torch) if torch else _numpy_baseline(p)
            if theirs is not None:
                theirs()
            reference = gemm if p.flops else None
            mine, base, ref = _interleaved(p.run, theirs, passes, reference)
            share = busy = ""
            if p.memory_bound:
                share = f"{p.traffic(outputs) / mine / bandwidth:>6.0%}"
            if p.flops:  # against the GEMM timed in the same passes (the same load)
                busy = f"{p.flops / mine / (_gemm(*DGEMM_SHAPE) / ref):>6.0%}"
            if base is None:
                line = f"{'-':>11}{'':>8}"
            else:
                ratios.setdefault(dtype, []).append((p, base / mine))
                line = f"{base * 1e3:>11.1f}{base / mine:>8.2f}"
            clear()
            print(f"{p.name:<18}{p.shape:<42}{mine * 1e3:>12.1f}{line}{share:>7}{busy:>7}")
        if ratios.get(dtype):
            values = [r for _, r in ratios[dtype]]
            memory = [r for q, r in ratios[dtype] if q.memory_bound]
            geo = float(np.exp(np.mean(np.log(values))))
            print(f"geometric mean of the ratios: {geo:.2f}", end="")
            if memory:
                print(f" (memory-bound ops: {float(np.exp(np.mean(np.log(memory)))):.2f})")
            else:
                print()
    if first_use:
        with tempfile.TemporaryDirectory() as cache:
            cold = first_use_seconds(cache)
            warm = first_use_seconds(cache)
        print(
            f"\nfirst use of every activation (import + compile, float32): cold cache "
            f"{cold:.1f} s, warm cache {warm:.1f} s"
        )
