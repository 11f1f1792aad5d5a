"""Every kernel of the catalog under hypothesis-drawn bad and odd input (SPEC, "Bad input").

Each example is a batch of calls: a catalog module (``derive/catalog.py``), one of its public
functions, and arguments drawn around a valid call -- shapes from small symbolic dimensions
(0 included), dtypes float16/32/64 and the unsupported int64, complex128 and bool, layouts
C, Fortran, transposed, strided, reversed (negative strides) and big-endian, values with NaN,
inf and huge entries, keywords from valid values and from strings, lists, bools, None,
NaN, negative and huge numbers. A call passes when it returns, or raises ValueError or
TypeError whose message starts with the name of one of the function's parameters (SPEC:
errors name the argument), and leaves every input array (and the memory it is a view of)
as it was. A warning counts as a failure (tests run with warnings as errors).

The calls run in a separate Python process (one worker, started once per module and fed
one batch per line), so that a segmentation fault or an abort in a Numba loop fails this
test instead of killing pytest; a worker that dies or does not answer within
``CALL_TIMEOUT`` seconds fails the example that was running. The worker's address space is
limited (``MEMORY_LIMIT``), so that a runaway allocation is a MemoryError (a failure) and not
a machine swapping.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels
from derive.catalog import CATALOG

ROOT = Path(__file__).resolve().parents[2]

#: Seconds a batch may take in the worker (the first call of a kernel loads its compiled
#: loops from Numba's cache, or compiles them once if the cache is cold).
CALL_TIMEOUT = 300

#: The worker's address-space limit: far above what the small arrays here need (the worker
#: peaks below 1 GiB), far below the machine's memory.
MEMORY_LIMIT = 6 * 2**30

#: Exceptions a kernel may raise on bad input.
ALLOWED = ("ValueError", "TypeError")

WORKER = r"""
import json, resource, sys, traceback, warnings

limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

import numpy as np
import importlib
from kernels import compose

FILLS = ("normal", "normal", "normal", "zeros", "nan", "inf", "huge")


def values(rng, shape, dtype, fill):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(-3, 4, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    data = rng.standard_normal(shape)
    if fill == "zeros":
        data = np.zeros(shape)
    elif fill in ("nan", "inf") and data.size:
        data.flat[rng.integers(data.size)] = np.nan if fill == "nan" else -np.inf
    elif fill == "huge":
        data = data * float(np.finfo(dtype).max) / 4
    return data.astype(dtype)


def array(spec, rng, inputs, name):
    shape, dtype, layout = tuple(spec["shape"]), spec["dtype"], spec["layout"]
    if layout == "strided" and shape:
        base = values(rng, (*shape[:-1], 2 * shape[-1]), dtype, spec["fill"])
        view = base[..., ::2]
    elif layout == "transposed":
        base = values(rng, shape[::-1], dtype, spec["fill"])
        view = base.T
    else:
        base = values(rng, shape, dtype, spec["fill"])
        if layout == "F":
            base = np.asfortranarray(base)
        elif layout == "big":
            base = base.astype(base.dtype.newbyteorder(">"))
        view = base[::-1] if layout == "reversed" and shape else base
    inputs.append((name, base, base.copy()))
    return view


def argument(spec, rng, inputs, name, forward_output):
    kind = spec["kind"]
    if kind == "value":
        return spec["value"]
    if kind == "array":
        return array(spec, rng, inputs, name)
    if kind == "grad":
        shape = spec["shape"] if spec["shape"] is not None else forward_output
        return array({**spec, "shape": shape}, rng, inputs, name)
    if kind == "branch":
        d, h, dtype = spec["D"], spec["hidden"], spec["dtype"]
        W1, b1 = values(rng, (h, d), dtype, "normal"), values(rng, (h,), dtype, "normal")
        out = spec["out"]
        W2, b2 = values(rng, (out, h), dtype, "normal"), values(rng, (out,), dtype, "normal")
        for i, p in enumerate((W1, b1, W2, b2)):
            inputs.append((f"branch parameter {i}", p, p.copy()))
        return compose.ffn(W1, b1, W2, b2)
    raise ValueError(kind)


def forward_shape(module, call):
    # The shape of the paired forward's output, for a gradient drawn to match it.
    rng = np.random.default_rng(call["seed"])
    inputs = []
    args = [argument(a, rng, inputs, str(i), None) for i, a in enumerate(call["forward_args"])]
    kwargs = {k: argument(a, rng, inputs, k, None) for k, a in call["kwargs"].items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = getattr(module, call["forward"])(*args, **kwargs)
    except Exception:
        return list(np.shape(args[0])) if args else []
    return list(y.shape) if isinstance(y, np.ndarray) else []


def run(call):
    module = importlib.import_module("kernels." + call["module"])
    output = forward_shape(module, call) if call["forward"] else None
    rng = np.random.default_rng(call["seed"])
    inputs = []
    args = [argument(a, rng, inputs, n, output) for n, a in zip(call["names"], call["args"])]
    kwargs = {k: argument(a, rng, inputs, k, output) for k, a in call["kwargs"].items()}
    outcome, message = "ok", ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            getattr(module, call["function"])(*args, **kwargs)
    except Exception as error:
        outcome = type(error).__name__
        message = str(error)[:400]
        if outcome not in ("ValueError", "TypeError"):
            message += "\n" + traceback.format_exc()[-3000:]
    written = [name for name, base, before in inputs if base.tobytes() != before.tobytes()]
    return {"outcome": outcome, "message": message, "written": written}


for line in sys.stdin:
    batch = json.loads(line)
    print(json.dumps([run(call) for call in batch]), flush=True)
"""


class Worker:
    """The worker process: one JSON batch per line in, one JSON list of results out."""

    def __init__(self, log: Path):
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(MEMORY_LIMIT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=ROOT,
                env=env,
            )

    def run(self, batch: list[dict]) -> list[dict]:
        if self.process is None or self.process.poll() is not None:
            self.start()
        process = self.process
        process.stdin.write(json.dumps(batch) + "\n")
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], CALL_TIMEOUT)
        if not ready:
            self.stop()
            pytest.fail(f"the worker did not answer within {CALL_TIMEOUT} s: {batch}")
        line = process.stdout.readline()
        if not line:
            code = process.wait()
            tail = self.log.read_text(errors="replace")[-3000:]
            self.stop()
            pytest.fail(f"the worker died (exit code {code}) on the batch {batch}\n{tail}")
        return json.loads(line)

    def stop(self) -> None:
        """Kill the worker (if it still runs) and close its pipes."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()
        self.process = None


@pytest.fixture(scope="module")
def worker():
    with tempfile.TemporaryDirectory() as folder:
        w = Worker(Path(folder) / "worker.log")
        yield w
        w.stop()


# --------------------------------------------------------------------------------------
# What to call: per module, its functions and a template of a valid call
# --------------------------------------------------------------------------------------
#
# A template argument is ("array", dims) with symbolic dimensions (letters, drawn per
# example), ("value", valid values), ("grad",) for the upstream gradient (shaped like the
# paired forward's output), ("branch",) for a residual branch, or ("maybe", dims): an array
# or None.

X2 = ("array", "ND")
ROWS = {"x": X2}
ELEMENTWISE = ("forward", "vjp", "jacobian", "derivative")
EPS = ("value", (1e-5, 0.0, 1e-3))


def _norm(beta: tuple) -> dict:
    return {"x": X2, "gamma": ("array", "D"), "beta": beta, "eps": EPS}


#: module -> (functions, positional template after x, keyword template).
TEMPLATES: dict[str, tuple[tuple[str, ...], dict, dict]] = {
    "linear": (("forward", "vjp", "jacobian"), {"x": X2, "W": ("array", "OD"),
               "b": ("maybe", "O")}, {}),
    "conv2d": (("forward", "vjp", "jacobian"), {"x": ("array", "NCHW"), "W": ("array", "OCKK"),
               "b": ("maybe", "O"), "stride": ("value", (1, 2, [1, 2])),
               "padding": ("value", (0, 1, [1, 0]))},
               {"padding_mode": ("value", ("zeros", "circular"))}),
    "sigmoid": (ELEMENTWISE, ROWS, {}),
    "relu": (ELEMENTWISE, ROWS, {}),
    "swish": (ELEMENTWISE, ROWS, {}),
    "gelu": (ELEMENTWISE, {"x": X2, "approximate": ("value", ("none", "tanh", "sigmoid"))}, {}),
    "softmax": (("forward", "vjp", "jacobian"), ROWS, {}),
    "dp_attention": (("forward", "vjp", "jacobian"), {"X": X2, "Wq": ("array", "KD"),
                     "Wk": ("array", "KD"), "Wv": ("array", "OD")}, {}),
    "l2_attention": (("forward", "vjp", "jacobian"), {"X": X2, "Wq": ("array", "KD"),
                     "Wv": ("array", "OD")}, {}),
    "scs_attention": (("forward", "vjp", "jacobian"), {"X": X2, "Wq": ("array", "KD"),
                      "Wk": ("array", "KD"), "Wv": ("array", "OD"),
                      "nu": ("value", (1.0, -0.5)), "tau": ("value", (1.0, 3.0)), "eps": EPS},
                      {}),
    "layernorm": (("forward", "vjp", "jacobian"), _norm(("array", "D")), {}),
    "rmsnorm": (("forward", "vjp", "jacobian"), _norm(("maybe", "D")), {}),
    "centernorm": (("forward", "vjp", "jacobian"), {"x": X2, "gamma": ("array", "D"),
                   "beta": ("array", "D")}, {}),
    "weightnorm": (("forward", "vjp", "jacobian"), {"x": X2, "v": ("array", "OD"),
                   "gamma": ("array", "O"), "eps": EPS}, {}),
    "batchnorm": (("forward", "vjp", "jacobian", "running_update"), {"x": X2,
                  "gamma": ("array", "D"), "beta": ("array", "D"), "eps": EPS},
                  {"training": ("value", (True, False)), "running_mean": ("maybe", "D"),
                   "running_var": ("maybe", "D"), "momentum": ("value", (0.1,)),
                   "denom": ("value", ("sqrt_var_eps", "std_plus_eps"))}),
    "residual": (("forward", "vjp", "jacobian"), {"x": X2, "branch": ("branch",)}, {}),
    "weighted_residual": (("forward", "vjp", "jacobian"), {"x": X2, "branch": ("branch",),
                          "nu": ("array", "D")}, {}),
    "maxpool": (("forward", "vjp", "jacobian", "forward2d", "vjp2d", "jacobian2d"), ROWS, {}),
    "avgpool": (("forward", "vjp", "jacobian", "forward2d", "vjp2d", "jacobian2d"), ROWS, {}),
}  # fmt: skip

#: The windowed pooling template (forward2d, vjp2d, jacobian2d).
WINDOWED = {"x": ("array", "NCHW"), "kernel_size": ("value", (1, 2, [2, 1])),
            "stride": ("value", (None, 1, 2)), "padding": ("value", (0, 1))}  # fmt: skip

#: batchnorm.running_update's template.
RUNNING = {"x": X2, "running_mean": ("array", "D"), "running_var": ("array", "D"),
           "momentum": ("value", (0.1, 0.0, 1.0))}  # fmt: skip

FLOAT_DTYPES = ("float16", "float32", "float64")
DTYPES = (*FLOAT_DTYPES, "int64", "complex128", "bool")
LAYOUTS = ("C", "C", "F", "transposed", "strided", "reversed", "big")
FILLS = ("normal", "normal", "normal", "zeros", "nan", "inf", "huge")

#: Keyword values that are wrong in kind or in range for some keyword.
ODD_VALUES = (
    "x", "", "no", "none", [1, 2], [], ["tanh"], True, False, None, math.nan, math.inf,
    -math.inf, -1, -1.5, 0, 3, 10**20, 2**40, -(2**63), 10**400, 1e300, 1e5, 0.5,
)  # fmt: skip


@st.composite
def array_spec(draw, dims: str, sizes: dict[str, int], dtype: str) -> dict:
    shape = [sizes[d] for d in dims]
    if draw(st.integers(0, 11)) == 0:  # a wrong shape
        shape = draw(st.lists(st.integers(0, 4), max_size=4))
    if draw(st.integers(0, 11)) == 0:  # another dtype
        dtype = draw(st.sampled_from(DTYPES))
    return {
        "kind": "array",
        "shape": shape,
        "dtype": dtype,
        "layout": draw(st.sampled_from(LAYOUTS)),
        "fill": draw(st.sampled_from(FILLS)),
    }


@st.composite
def template_argument(draw, spec: tuple, sizes: dict[str, int], dtype: str) -> dict:
    kind = spec[0]
    if kind == "array":
        return draw(array_spec(spec[1], sizes, dtype))
    if kind == "maybe":
        if draw(st.booleans()):
            return {"kind": "value", "value": None}
        return draw(array_spec(spec[1], sizes, dtype))
    if kind == "value":
        if draw(st.integers(0, 3)) == 0:
            return {"kind": "value", "value": draw(st.sampled_from(ODD_VALUES))}
        return {"kind": "value", "value": draw(st.sampled_from(spec[1]))}
    if kind == "branch":
        out = sizes["D"] if draw(st.integers(0, 7)) else sizes["O"]
        branch_dtype = dtype if draw(st.integers(0, 7)) else draw(st.sampled_from(FLOAT_DTYPES))
        if branch_dtype not in FLOAT_DTYPES:
            branch_dtype = "float64"
        return {"kind": "branch", "D": sizes["D"], "hidden": sizes["K"], "out": out,
                "dtype": branch_dtype}  # fmt: skip
    raise ValueError(kind)


@st.composite
def calls(draw) -> dict:
    key = draw(st.sampled_from([m.key for m in CATALOG]))
    functions, positional, keywords = TEMPLATES[key]
    function = draw(st.sampled_from(functions))
    if function.endswith("2d"):
        positional, keywords = WINDOWED, {}
    if function == "running_update":
        positional, keywords = RUNNING, {}
    positional = dict(positional)
    sizes = {d: draw(st.sampled_from((1, 1, 2, 2, 3, 0))) for d in "NDOCHWK"}
    sizes["K"] = max(1, min(sizes["K"], sizes["H"] or 1, sizes["W"] or 1))
    dtype = draw(st.sampled_from((*FLOAT_DTYPES * 4, "int64", "complex128", "bool")))
    if function.startswith("jacobian") and draw(st.integers(0, 3)):
        # one sample: drop the batch axis where the Jacobian takes one
        x_kind, x_dims = positional[next(iter(positional))]
        if key not in ("batchnorm", "dp_attention", "l2_attention", "scs_attention"):
            positional[next(iter(positional))] = (x_kind, x_dims[1:])
    names = list(positional)
    args = [draw(template_argument(positional[n], sizes, dtype)) for n in names]
    forward = ""
    if function.startswith("vjp"):
        forward = "forward2d" if function == "vjp2d" else "forward"
        gradient = {**draw(array_spec("", sizes, dtype)), "kind": "grad"}
        if draw(st.integers(0, 7)):  # mostly the shape of the forward's output
            gradient["shape"] = None
        forward_args = list(args)
        args.insert(1, gradient)
        names.insert(1, "G" if names[0] == "X" else "g")
    else:
        forward_args = []
    kwargs = {}
    for name, spec in keywords.items():
        if draw(st.booleans()):
            kwargs[name] = draw(template_argument(spec, sizes, dtype))
    strict = draw(st.sampled_from((None, None, None, None, False, True, "no", 1)))
    if dtype == "float16" and draw(st.booleans()):
        strict = True
    if strict is not None and function != "running_update":
        kwargs["strict_fp16"] = {"kind": "value", "value": strict}
    return {
        "module": key,
        "function": function,
        "forward": forward,
        "names": names,
        "args": args,
        "forward_args": forward_args,
        "kwargs": kwargs,
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


#: Names an error of a residual block may start with besides its own parameters: the
#: parameters of the branch's stages (``kernels.compose``), whose kernels check them when
#: the block runs the branch (e.g. a float32 x with a float16 branch is refused by the
#: branch's ``linear.forward`` as "W: expected dtype float32 (the dtype of x) ...").
BRANCH_NAMES = {"W", "b", "gamma", "beta", "stages"}


def _parameter_names(call: dict) -> set[str]:
    module = getattr(kernels, call["module"])
    names = set(inspect.signature(getattr(module, call["function"])).parameters)
    return names | BRANCH_NAMES if "branch" in names else names


def _describe(call: dict) -> str:
    return f"kernels.{call['module']}.{call['function']} with {json.dumps(call)}"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(calls(), min_size=1, max_size=8))
def test_every_kernel_survives_bad_input(worker, batch):
    results = worker.run(batch)
    for call, result in zip(batch, results, strict=True):
        what = _describe(call)
        assert result["written"] == [], f"{what} wrote into {result['written']}"
        outcome, message = result["outcome"], result["message"]
        assert outcome == "ok" or outcome in ALLOWED, f"{what} raised {outcome}: {message}"
        if outcome in ALLOWED:
            named = message.split(":", 1)[0].replace(" ", "").split(",")[0].split("[")[0]
            assert named in _parameter_names(call), f"{what}: {outcome} {message!r}"
