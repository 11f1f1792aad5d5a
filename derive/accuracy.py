"""``liptable accuracy --against torch``: PyTorch's own CPU implementations of the catalog
modules, measured against the correctly rounded results with ``kernels.testing``.

For each module PyTorch implements (every catalog module but GeLU-sigmoid, which it has
no function for), in float32, float16 and bfloat16: the forward and, through autograd
with a seeded upstream gradient, every gradient, on inputs that break naive kernels
(``kernels.testing.hard_inputs``: every finite 16-bit value for the activations, the
format's edges, constant, huge-mean and overflowing rows, masked and large logits) and on
random ones. The activations' infinite and NaN inputs are left out: there the two differ by
convention (liptable returns the limits, PyTorch's SiLU gives NaN at -inf and its ReLU
backward passes g through at NaN), not by accuracy. Each output gives its largest and
99th-percentile error in ULPs of the format, its NaN/inf mismatches and where the largest
error is. The table is written as JSON
(``report/accuracy/torch.json``) and rendered by the report; PyTorch is needed only here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from derive.reference.formats import round_float64
from kernels.testing import compare, hard_inputs

#: The formats measured, as PyTorch names them.
DTYPES = ("float32", "float16", "bfloat16")
#: Row width of the row modules' inputs, and the number of random rows added.
WIDTH, RANDOM_ROWS = 64, 32
SEED = 2026


def numpy_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def implementations(torch: Any) -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    """module -> (PyTorch's implementation taking liptable's inputs, the options it fixes)."""
    F = torch.nn.functional

    def attention(X, Wq, Wk, Wv):
        q, k, v = (X @ W.T for W in (Wq, Wk, Wv))
        return F.scaled_dot_product_attention(q[None], k[None], v[None])[0]

    return {
        "sigmoid": (torch.sigmoid, {}),
        "relu": (F.relu, {}),
        "swish": (F.silu, {}),
        "gelu": (F.gelu, {}),
        "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), {}),
        "softmax": (lambda x: torch.softmax(x, dim=-1), {}),
        "layernorm": (lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, 1e-5), {"eps": 1e-5}),
        "rmsnorm": (lambda x, g: F.rms_norm(x, (x.shape[-1],), g, 1e-6), {"eps": 1e-6}),
        "batchnorm": (
            lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True, eps=1e-5),
            {"eps": 1e-5},
        ),
        "linear": (F.linear, {}),
        "maxpool": (lambda x: x.amax(dim=-1), {}),
        "avgpool": (lambda x: x.mean(dim=-1), {}),
        "dp_attention": (attention, {}),
    }


def _cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` rounded once to ``dtype`` (ml_dtypes' own cast rounds twice)."""
    return round_float64(values, dtype)


def inputs(module: str, dtype: np.dtype, rng: np.random.Generator) -> list[np.ndarray]:
    """The arrays liptable's kernel takes for ``module`` (x first), in ``dtype``."""
    if module in ("sigmoid", "relu", "swish", "gelu", "gelu_tanh"):
        cases = hard_inputs(module, dtype)
        random = _cast(rng.standard_normal(4096) * 4, dtype)
        x = np.concatenate([*cases.values(), random])
        with np.errstate(invalid="ignore"):  # bfloat16's signaling NaNs, widened to be tested
            return [x[np.isfinite(x.astype(np.float32))]]
    if module in ("softmax", "layernorm", "rmsnorm", "maxpool", "avgpool"):
        hard = np.concatenate(list(hard_inputs(module, dtype, WIDTH).values()))
        random = _cast(rng.standard_normal((RANDOM_ROWS, WIDTH)) * 3, dtype)
        x = np.concatenate([hard, random])
        if module in ("layernorm", "rmsnorm"):
            gamma = _cast(1 + 0.1 * rng.standard_normal(WIDTH), dtype)
            beta = _cast(0.1 * rng.standard_normal(WIDTH), dtype)
            return [x, gamma, beta] if module == "layernorm" else [x, gamma]
        return [x]
    if module == "batchnorm":
        x = rng.standard_normal((32, 8)) * 2
        x[:, 0] = 3.0  # a constant feature: zero variance
        x[:, 1] = 1000 + rng.standard_normal(32)  # a huge mean with a small spread
        return [_cast(x, dtype), _cast(np.ones(8), dtype), _cast(np.zeros(8), dtype)]
    if module == "linear":
        return [
            _cast(rng.standard_normal((16, 64)), dtype),
            _cast(rng.standard_normal((32, 64)) / 8, dtype),
            _cast(rng.standard_normal(32), dtype),
        ]
    if module == "dp_attention":
        return [_cast(rng.standard_normal((8, 16)) * 2, dtype)] + [
            _cast(rng.standard_normal((8, 16)) / 4, dtype) for _ in range(3)
        ]
    raise ValueError(f"no PyTorch implementation measured for {module!r}")


def _tensor(torch: Any, array: np.ndarray) -> Any:
    if array.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def _number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def measure(modules: list[str] | None = None, dtypes: tuple[str, ...] = DTYPES) -> dict:
    """The table: one record per module, format and output."""
    import torch  # the optional extra; only this command needs it

    table = implementations(torch)
    records = []
    for module in modules or list(table):
        fn, options = table[module]
        for name in dtypes:
            dtype = numpy_dtype(name)
            rng = np.random.default_rng(SEED)
            arrays = inputs(module, dtype, rng)
            tensors = [_tensor(torch, a) for a in arrays]
            with np.errstate(all="ignore"):
                report = compare(fn, module, *tensors, grad=True, seed=SEED, **options)
            for c in report.comparisons:
                records.append(
                    {
                        "module": module,
                        "dtype": name,
                        "output": c.name,
                        "max_ulp": _number(c.max_ulp),
                        "p99_ulp": _number(c.p99_ulp),
                        "nonfinite_mismatches": c.nonfinite_mismatches,
                        "worst": c.worst,
                    }
                )
    return {"torch": torch.__version__, "seed": SEED, "records": records}


def write(path: Path, modules: list[str] | None = None) -> dict:
    """Measure and write the JSON table to ``path``."""
    result = measure(modules)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result
