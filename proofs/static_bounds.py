"""Static error bounds of the bounded forms, proven by enumerating every finite float32.

The fast loops of the elementwise kernels evaluate a form ``{q}_fe`` in float64 and decide
the rounding of its value ``v`` from a bound ``e`` on its error. The running bound ``e``
(``kernels/_vmath.py``'s rules) is sound for every input, and costs about as much as the
value. For a form that does not cancel, ``e`` is a small multiple of ``|v|``, and a
constant ``RELATIVE`` with ``e <= RELATIVE |v| + ABSOLUTE`` can replace it.

:func:`prove` establishes such a constant for one form by exhaustion:

1. over every finite float32 ``x`` (2^32 - 2^24 of them), the largest ``(e - A) / |v|``
   per binade of ``|x|``, and the smallest ``|x|`` where ``e`` is not finite (or ``v = 0``
   with ``e > A``);
2. the domain ``|x| <= LIMIT`` ends before that ``|x|`` and before the first binade whose
   ratio exceeds ``RELATIVE_TARGET`` (a form whose error grows with ``|x|``, like the
   GeLUs' far tails, keeps the running bound out there); ``RELATIVE`` is the power of two
   at or above the largest ratio inside;
3. a second pass checks ``e <= RELATIVE * |v| + ABSOLUTE``, with exactly the float64
   arithmetic the kernels use, on every finite float32 with ``|x| <= LIMIT``; a single
   failure is an error.

Float16 and bfloat16 values are float32 values, so the record covers their loops too. The
VJP's bound ``|g| e + U |v| + TINY`` is monotone in ``e``, so the derivative's record
covers it. Elements beyond ``LIMIT`` (and NaN, inf) get an infinite bound and go to the
scalar path, as before.
"""

from __future__ import annotations

import importlib
import math
import re
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from derive.codegen.static import ABSOLUTE, RELATIVE_TARGET, StaticBound, form_digest
from derive.progress import show
from kernels._f16 import reinterpret

__all__ = ["CHUNK", "fe_source", "prove", "ratios", "violations"]

#: Bit patterns per parallel task: a binade of one sign holds two.
CHUNK = 2**22
_FLOAT32_PATTERNS = 2**32
_BINADES = 256
_SCANNERS: dict = {}


def fe_source(module: str, quantity: str) -> str:
    """The text of ``{quantity}_fe`` in ``kernels/_generated/<module>.py``, as emitted."""
    path = importlib.import_module(f"kernels._generated.{module}").__file__
    text = Path(path).read_text()
    head = rf'@njit\(cache=True, inline="always", error_model="numpy"\)\ndef {quantity}_fe\(x\):'
    start = re.search(head, text)
    if start is None:
        raise ValueError(f"{module}: no {quantity}_fe")
    end = text.find("\n\n\n", start.start())
    return text[start.start() : end if end >= 0 else len(text)]


def _scanners(module: str, quantity: str):
    """``(ratios, checks)``: parallel scans of float32 bit-pattern ranges for
    ``{quantity}_fe`` of ``module``, compiled with the form inlined (a function passed as
    an argument would not be)."""
    if (module, quantity) in _SCANNERS:
        return _SCANNERS[module, quantity]
    fe = getattr(importlib.import_module(f"kernels._generated.{module}"), f"{quantity}_fe")

    @njit(error_model="numpy")
    def ratio(lo, hi, absolute):
        largest, bad, finite = -1.0, np.inf, 0
        for bits in range(lo, hi):
            x = np.float64(reinterpret(np.uint32(bits), np.float32))
            a = abs(x)
            v, e = fe(x)
            usable = a < np.inf
            broken = usable and (not e < np.inf or (v == 0.0 and e > absolute))
            r = (e - absolute) / abs(v) if usable and not broken and e > absolute else -1.0
            largest = max(largest, r)
            bad = min(bad, a if broken else np.inf)
            finite += 1 if usable else 0
        return largest, bad, finite

    @njit(error_model="numpy")
    def check(lo, hi, relative, absolute, limit):
        failed, inside, smallest = 0, 0, np.inf
        for bits in range(lo, hi):
            x = np.float64(reinterpret(np.uint32(bits), np.float32))
            a = abs(x)
            v, e = fe(x)
            within = a <= limit
            fails = within and not e <= relative * abs(v) + absolute
            failed += 1 if fails else 0
            inside += 1 if within else 0
            smallest = min(smallest, a if fails else np.inf)
        return failed, inside, smallest

    @njit(parallel=True, error_model="numpy")
    def ratios(los, his, absolute):
        largest, bad = np.empty(los.size), np.empty(los.size)
        finite = np.empty(los.size, dtype=np.int64)
        for i in prange(los.size):
            largest[i], bad[i], finite[i] = ratio(los[i], his[i], absolute)
        return largest, bad, finite

    @njit(parallel=True, error_model="numpy")
    def checks(los, his, relative, absolute, limit):
        failed = np.empty(los.size, dtype=np.int64)
        inside = np.empty(los.size, dtype=np.int64)
        smallest = np.empty(los.size)
        for i in prange(los.size):
            failed[i], inside[i], smallest[i] = check(los[i], his[i], relative, absolute, limit)
        return failed, inside, smallest

    _SCANNERS[module, quantity] = ratios, checks
    return ratios, checks


def _chunks(first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``first .. first + count`` cut at multiples of CHUNK, as the pieces' starts and ends:
    each piece lies in one binade of one sign."""
    inner = range((first // CHUNK + 1) * CHUNK, first + count, CHUNK)
    edges = np.array([first, *inner, first + count], dtype=np.int64)
    return edges[:-1], edges[1:]


def ratios(module: str, quantity: str, first: int, count: int, absolute: float):
    """Over the finite float32 of the bit patterns ``first .. first + count - 1``:
    ``(largest, smallest_bad, finite)``: the largest ``(e - A)/|v|`` per binade of ``|x|``
    (256 entries by biased exponent, -1 where none), the smallest ``|x|`` whose bound is not
    finite or whose ``v`` is 0 with ``e > A`` (inf if none), and how many are finite."""
    scan, _ = _scanners(module, quantity)
    los, his = _chunks(first, count)
    pieces, bad, finite = scan(los, his, absolute)
    largest = np.full(_BINADES, -1.0)
    np.maximum.at(largest, (los >> 23) & 0xFF, pieces)
    return largest, float(bad.min()), int(finite.sum())


def violations(module, quantity, first, count, relative, absolute, limit):
    """Among the bit patterns ``first .. first + count - 1``: ``(failed, smallest, inside)``,
    how many finite float32 ``x`` with ``|x| <= limit`` have ``e > relative |v| + absolute``
    (computed as the kernels compute it), the smallest such ``|x|`` (inf if none), and how
    many have ``|x| <= limit``."""
    _, check = _scanners(module, quantity)
    failed, inside, smallest = check(*_chunks(first, count), relative, absolute, limit)
    return int(failed.sum()), float(smallest.min()), int(inside.sum())


def _previous_float32(value: float) -> float:
    return float(np.nextafter(np.float32(value), np.float32(0)))


def _power_of_two_at_least(ratio: float) -> float:
    """The smallest power of two >= ``ratio`` (> 0)."""
    mantissa, exponent = math.frexp(ratio)
    return math.ldexp(1.0, exponent - 1) if mantissa == 0.5 else math.ldexp(1.0, exponent)


def domain(largest: np.ndarray, bad: float) -> tuple[float, float]:
    """``(limit, ratio)``: the float32 before the first binade whose ratio exceeds
    ``RELATIVE_TARGET`` or before ``bad`` (the largest finite float32 if neither), and the
    largest ratio of the binades up to the limit's."""
    over = np.flatnonzero(largest > RELATIVE_TARGET)
    limit = float(np.finfo(np.float32).max)
    if over.size:
        limit = _previous_float32(math.ldexp(1.0, int(over[0]) - 127))  # binade b: 2^(b-127)
    if bad < np.inf:
        limit = min(limit, _previous_float32(bad))
    top = np.frexp(np.float32(limit))[1] - 1 + 127 if limit > 0 else 0
    return limit, float(largest[: top + 1].max())


def prove(module: str, quantity: str, *, first: int = 0, count: int = _FLOAT32_PATTERNS):
    """The :class:`StaticBound` of ``module``'s ``quantity``, proven over the float32 bit
    patterns ``first .. first + count - 1`` (all of them by default; a slice proves the
    bound for that slice only, which the tests use). Raises if the second pass finds an
    input that the chosen constant does not cover."""
    start = time.perf_counter()
    show(f"prove-bounds {module}.{quantity}: ratios")
    largest, bad, inputs = ratios(module, quantity, first, count, ABSOLUTE)
    limit, ratio = domain(largest, bad)
    relative = _power_of_two_at_least(ratio) if ratio > 0 else 2.0**-60
    show(f"prove-bounds {module}.{quantity}: checking 2^{math.log2(relative):.0f}")
    failed, where, inside = violations(module, quantity, first, count, relative, ABSOLUTE, limit)
    if failed:
        raise AssertionError(
            f"{module}.{quantity}: {failed} inputs exceed 2^{math.log2(relative):.0f} |v| "
            f"+ A, the first at |x| = {where!r}"
        )
    return StaticBound(
        module=module,
        quantity=quantity,
        relative=relative,
        absolute=ABSOLUTE,
        limit=limit,
        largest_ratio=ratio,
        inputs=inputs,
        outside=inputs - inside,
        seconds=round(time.perf_counter() - start, 1),
        digest=form_digest(fe_source(module, quantity)),
    )
