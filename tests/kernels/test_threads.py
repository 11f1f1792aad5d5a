"""Kernels called from several Python threads at once (``kernels/_threads.py``).

Numba's ``workqueue`` threading layer (its fallback without TBB or OpenMP) aborts the
process when two threads launch ``parallel=True`` loops at the same time; the kernels
serialize their parallel loops there. The end-to-end test runs 8 threads in a fresh
interpreter with ``NUMBA_THREADING_LAYER=workqueue`` (a crash fails the test, not pytest)
and demands the bits of a serial run with one Numba thread, and of this process's run on
whatever layer it has: results do not depend on the layer, the thread count or the
interleaving.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from numba.core.registry import CPUDispatcher

import kernels
from kernels import _threads, softmax
from kernels._grain import GRAIN

ROOT = Path(__file__).resolve().parents[2]
THREADS = 8
#: Each thread's rounds over every kernel: enough for the parallel loops to overlap.
ROUNDS = 4

#: The calls, as source run both here and in the subprocess: one name per result, built
#: from fixed seeds. Sizes: a few milliseconds per call, so threads run into each other.
WORKLOAD = """
import hashlib

import numpy as np
from kernels import (
    avgpool, batchnorm, conv2d, dp_attention, gelu, layernorm, maxpool, relu, softmax,
    weightnorm,
)

rng = np.random.default_rng(20240601)
x = rng.standard_normal((384, 128))
g = rng.standard_normal((384, 128))
gamma, beta = rng.standard_normal(128), rng.standard_normal(128)
images = rng.standard_normal((4, 6, 32, 32))
W = rng.standard_normal((5, 6, 3, 3))
X = rng.standard_normal((48, 16))
Wq, Wk, Wv = (rng.standard_normal((8, 16)) for _ in range(3))
v = rng.standard_normal((256, 128))
gain = rng.standard_normal(256)

CALLS = {
    "layernorm.forward": lambda: layernorm.forward(x, gamma, beta),
    "layernorm.vjp": lambda: layernorm.vjp(x, g, gamma, beta),
    "batchnorm.forward": lambda: batchnorm.forward(x, gamma, beta),
    "batchnorm.vjp": lambda: batchnorm.vjp(x, g, gamma, beta),
    "softmax.forward": lambda: softmax.forward(x),
    "softmax.vjp": lambda: softmax.vjp(x, g),
    "maxpool.forward2d": lambda: maxpool.forward2d(images, 2, 2),
    "avgpool.vjp2d": lambda: avgpool.vjp2d(images, np.ones((4, 6, 16, 16)), 2, 2),
    "avgpool.forward": lambda: avgpool.forward(x),
    "dp_attention.forward": lambda: dp_attention.forward(X, Wq, Wk, Wv),
    "dp_attention.vjp": lambda: dp_attention.vjp(X, np.ones((48, 8)), Wq, Wk, Wv),
    "relu.vjp": lambda: relu.vjp(x, g),
    "gelu.forward": lambda: gelu.forward(x.astype(np.float32)),
    "weightnorm.forward": lambda: weightnorm.forward(x, v, gain),
    "conv2d.forward": lambda: conv2d.forward(images.astype(np.float16), W.astype(np.float16),
                                             strict_fp16=True),
}


def digest(result):
    arrays = result if isinstance(result, tuple) else (result,)
    h = hashlib.sha256()
    for array in arrays:
        h.update(str((array.dtype, array.shape)).encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()
"""

#: The subprocess: a serial pass on one Numba thread, then THREADS threads at once.
CONCURRENT = """
import json, sys, threading
import numba
__WORKLOAD__

numba.set_num_threads(1)  # per thread in Numba: this thread's loops run on one thread
serial = {name: digest(call()) for name, call in CALLS.items()}

errors, mismatches = [], []
start = threading.Barrier(__THREADS__)

def work(index):
    try:
        start.wait()
        for round_ in range(__ROUNDS__):
            for offset in range(len(CALLS)):  # each thread starts at another kernel
                name = list(CALLS)[(index + offset) % len(CALLS)]
                if digest(CALLS[name]()) != serial[name]:
                    mismatches.append((index, round_, name))
    except BaseException as error:
        errors.append(f"thread {index}: {type(error).__name__}: {error}")

threads = [threading.Thread(target=work, args=(i,)) for i in range(__THREADS__)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"layer": numba.threading_layer(), "threads": numba.config.NUMBA_NUM_THREADS,
                  "serial": serial, "errors": errors, "mismatches": mismatches}))
"""


def _workload() -> dict:
    namespace: dict = {}
    exec(WORKLOAD, namespace)  # the test's own source, shared with the subprocess
    return namespace


def test_concurrent_calls_on_the_workqueue_layer_match_a_serial_run():
    namespace = _workload()
    smallest = min(namespace[name].size for name in ("x", "v"))
    assert smallest >= GRAIN, "below the grain the norms would run their serial twins"
    code = CONCURRENT.replace("__WORKLOAD__", WORKLOAD)
    code = code.replace("__THREADS__", str(THREADS)).replace("__ROUNDS__", str(ROUNDS))
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        f"the interpreter ended with {done.returncode} (negative: killed by that signal; "
        f"-6 is workqueue's abort on concurrent access)\n{done.stderr[-3000:]}"
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["layer"] == "workqueue"
    assert not report["errors"], report["errors"]
    assert not report["mismatches"], "(thread, round, kernel) unlike the serial run: " + str(
        report["mismatches"][:10]
    )
    # and the same bits as this process, on its own layer and thread count
    here = {name: namespace["digest"](call()) for name, call in namespace["CALLS"].items()}
    assert report["serial"] == here


def _parallel(value: object) -> bool:
    return isinstance(value, CPUDispatcher) and bool(value.targetoptions.get("parallel"))


def test_every_handwritten_parallel_loop_is_wrapped():
    """A parallel loop added to a hand-written module without ``@thread_safe`` would abort
    threaded callers on workqueue. (The generated loops are wrapped where they are looked
    up, which the test above exercises.)"""
    bare, wrapped = [], []
    for name in kernels.__all__:
        module = getattr(kernels, name)
        for attr, value in vars(module).items():
            if _parallel(value) and value.__module__ == module.__name__:
                bare.append(f"{module.__name__}.{attr}")
            if _parallel(getattr(value, "__wrapped__", None)) and inspect.isfunction(value):
                wrapped.append(f"{module.__name__}.{attr}")
    assert not bare, f"parallel loops without @thread_safe: {bare}"
    assert "kernels.softmax._forward_rows" in wrapped  # the check sees the wrapped ones


# --- the lock itself, with the layer faked ------------------------------------------------


def _overlap(monkeypatch, layer: str | None) -> bool:
    """Whether two threads calling a wrapped function get inside it at the same time."""

    def threading_layer() -> str:
        if layer is None:
            raise ValueError("Threading layer is not initialized.")
        return layer

    monkeypatch.setattr(_threads.numba, "threading_layer", threading_layer)
    meet = threading.Barrier(2, timeout=1.0)
    met = []

    @_threads.thread_safe
    def loop(index):
        try:
            meet.wait()  # passes only if the other thread is inside too
            met.append(index)
        except threading.BrokenBarrierError:
            pass

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(met) == 2


@pytest.mark.parametrize(
    ("layer", "serialized"),
    [("workqueue", True), (None, True), ("omp", False), ("tbb", False)],
    ids=["workqueue", "not-chosen-yet", "omp", "tbb"],
)
def test_calls_take_turns_only_where_the_layer_needs_it(monkeypatch, layer, serialized):
    assert _overlap(monkeypatch, layer) is not serialized


def test_a_wrapped_loop_keeps_its_name_and_dispatcher():
    assert softmax._forward_rows.__name__ == "_forward_rows"
    assert _parallel(softmax._forward_rows.__wrapped__)
