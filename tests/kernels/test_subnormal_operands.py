"""The bounded fast loops take no subnormal operand where the values they compute are normal.

An Intel core handles an arithmetic instruction with a subnormal operand by a microcode
assist, about a hundred cycles: with ``TINY = 2^-1074`` added into every running bound,
Swish's bounded derivative took 85 ns an element against 10 with a normal TINY, and its
VJP over (4096, 1024) float32 229 ms against 20. The processor records such an operand
in the DE flag (bit 1) of its MXCSR register; these tests clear the register's flags, run
one block of a fast loop on this thread (the serial ``_block`` functions, not the
threaded ``_loop``: MXCSR is per thread) and read the flag back.

Skipped off x86-64, where there is no MXCSR.
"""

from __future__ import annotations

import importlib
import platform

import numpy as np
import pytest
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from derive.codegen import generate
from derive.definitions.activations import ELEMENTWISE
from kernels._validate import BFLOAT16

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="MXCSR is x86's"
)

BOUNDED = [m.key for m in ELEMENTWISE if generate.bounded(m)]
_DENORMAL_OPERAND = 0x2
_FLAGS = 0x3F


def _mxcsr_through_slot(builder: ir.IRBuilder, name: str, value: ir.Value | None = None):
    """Call LLVM's ``llvm.x86.sse.<name>`` (``stmxcsr`` stores MXCSR into a 32-bit slot,
    ``ldmxcsr`` loads it from one) on a fresh stack slot holding ``value``; the slot."""
    slot = cgutils.alloca_once(builder, ir.IntType(32))
    if value is not None:
        builder.store(value, slot)
    pointer = builder.bitcast(slot, ir.IntType(8).as_pointer())
    kind = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
    builder.call(builder.module.declare_intrinsic(f"llvm.x86.sse.{name}", (), kind), [pointer])
    return slot


@intrinsic
def _read_mxcsr(typingctx):
    def codegen(context, builder, signature, args):
        return builder.load(_mxcsr_through_slot(builder, "stmxcsr"))

    return types.int32(), codegen


@intrinsic
def _write_mxcsr(typingctx, value):
    def codegen(context, builder, signature, args):
        _mxcsr_through_slot(builder, "ldmxcsr", args[0])
        return context.get_dummy_value()

    return types.none(value), codegen


@njit
def _clear_flags():
    _write_mxcsr(np.int32(_read_mxcsr() & ~_FLAGS))


@njit
def _flags():
    return _read_mxcsr() & _FLAGS


@njit
def _multiply(a, b, out):
    out[0] = a * b


def _denormal_operand(run) -> bool:
    """Whether ``run()`` (one call from Python, on this thread) set MXCSR's DE flag."""
    _clear_flags()
    run()
    return bool(_flags() & _DENORMAL_OPERAND)


def test_the_flag_is_seen():
    """The probe itself: a product with a subnormal factor sets DE, a normal one does not,
    and nothing between the calls sets it."""
    out = np.empty(1)
    _multiply(1.0, 1.0, out)  # compiled before the probes
    _clear_flags()
    _flags()
    assert _denormal_operand(lambda: _multiply(2.0**-1074, 3.0, out))
    assert not _denormal_operand(lambda: _multiply(2.0**-1000, 3.0, out))
    assert not _denormal_operand(lambda: None)


def _inputs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """One block of x in [-8, 8] (both signs, values near 0) and of gradients in [-4, 4],
    as ``dtype``: every value and intermediate normal. Not x = 0, where the forward
    values are exact zeros: their interval holds -0 and +0, and the scalar path that
    settles them steps to the subnormal next to 0."""
    rng = np.random.default_rng(5)
    x = np.concatenate([np.linspace(-8.0, 8.0, 512), rng.normal(0.0, 2.0, 509), [1e-3, -1e-3, 1.0]])
    g = rng.uniform(-4.0, 4.0, x.size)
    return x.astype(dtype), g.astype(dtype)


def _storage(array: np.ndarray) -> np.ndarray:
    """The blocks read and write float16 and bfloat16 as their uint16 bits."""
    return array.view(np.uint16) if array.itemsize == 2 else array


@pytest.mark.parametrize(
    ("dtype", "suffix"),
    [(np.dtype(np.float32), "f32"), (np.dtype(np.float16), "f16"), (BFLOAT16, "bf16")],
    ids=["float32", "float16", "bfloat16"],
)
@pytest.mark.parametrize("quantity", ["forward", "derivative", "vjp"])
@pytest.mark.parametrize("key", BOUNDED)
def test_bounded_blocks_take_no_subnormal_operand(key, quantity, dtype, suffix):
    generated = importlib.import_module(f"kernels._generated.{key}")
    block = getattr(generated, f"{quantity}_{suffix}_block")
    x, g = _inputs(dtype)
    out = np.empty_like(x)
    args = (x, g, out) if quantity == "vjp" else (x, out)
    args = tuple(_storage(a) for a in args)
    block(*args)  # compiled (and the undecided elements, if any, settled) before the probe
    assert not _denormal_operand(lambda: block(*args)), (key, quantity, dtype)
