"""float16 facts of each elementwise module, from all 65,536 half inputs.

The facts about the exact function (overflow, flush to zero, the largest gradient gain and
the upstream-gradient size at which the backward pass overflows) come from the correctly
rounded references of :func:`derive.reference.core.float16_values` (the exhaustive tables'
values at every finite input): they are exhaustive, not sampled. The facts about strict
half arithmetic are measurements of the strict kernels on the same inputs, labelled as
such.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

import mpmath
import numpy as np

from derive.definitions.activations import elementwise
from derive.reference.core import evaluate, float16_values

#: The largest finite half value and the overflow threshold (the midpoint to 2^16).
HALF_MAX = 65504.0
HALF_OVERFLOW = 65520

_ALL_BITS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
ALL_HALVES = _ALL_BITS.view(np.float16)
FINITE = np.isfinite(ALL_HALVES)


def intervals(mask: np.ndarray, *, zeros: bool = False) -> list[tuple[float, float]]:
    """The maximal runs of finite half inputs (in increasing order) where ``mask`` holds;
    a run made of the two zeros alone is left out unless ``zeros``."""
    order = np.argsort(ALL_HALVES[FINITE].astype(np.float64), kind="stable")
    values = ALL_HALVES[FINITE][order].astype(np.float64)
    edges = np.diff(np.concatenate(([0], mask[FINITE][order].astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    runs = [(float(values[a]), float(values[b])) for a, b in zip(starts, ends, strict=True)]
    return [r for r in runs if zeros or not (r[0] == 0.0 and r[1] == 0.0)]


#: How many runs a sentence of the report lists before it counts the rest.
SHOWN_RUNS = 3


def _describe(runs: list[tuple[float, float]]) -> str:
    if not runs:
        return "no input"
    shown = ", ".join(
        f"{{{a:.6g}}}" if a == b else f"[{a:.6g}, {b:.6g}]" for a, b in runs[:SHOWN_RUNS]
    )
    rest = len(runs) - SHOWN_RUNS
    return shown + (f" and {rest} more intervals" if rest > 0 else "")


@dataclass(frozen=True)
class Float16Facts:
    """What half precision does to one module, with the numbers behind each sentence."""

    key: str
    forward_max: float
    forward_max_at: list[tuple[float, float]]
    forward_flush: list[tuple[float, float]]
    derivative_max: float
    derivative_max_at: list[tuple[float, float]]
    derivative_flush: list[tuple[float, float]]
    vjp_overflow_g: float | None
    strict_forward_differs: int
    strict_derivative_differs: int
    strict_derivative_nonfinite: list[tuple[float, float]]

    def lines(self) -> list[str]:
        out = [
            f"forward: largest |f(x)| over all finite half inputs is {self.forward_max:.6g} "
            f"(at x in {_describe(self.forward_max_at)}); "
            + ("it never overflows." if np.isfinite(self.forward_max) else "it overflows."),
            "forward is 0 in half precision (exactly, or rounded) for the nonzero inputs in "
            f"{_describe(self.forward_flush)}.",
            f"derivative: largest |f'(x)| over half inputs is {self.derivative_max:.6g} "
            f"(at x in {_describe(self.derivative_max_at)}); it is 0 in half precision "
            "(the gradient "
            f"vanishes) for x in {_describe(self.derivative_flush)}.",
        ]
        if self.vjp_overflow_g is None:
            out.append(
                "backward: no finite half upstream gradient g makes g f'(x) overflow "
                f"(max |f'| <= {HALF_OVERFLOW}/{HALF_MAX:g})."
            )
        else:
            out.append(
                "backward: g f'(x) overflows float16 (|exact| >= 65520) for some half x "
                f"exactly when |g| >= {self.vjp_overflow_g:.6g} (smallest such half g)."
            )
        broken = self.strict_derivative_nonfinite
        out.append(
            "strict mode (measured on the kernels over all 65,536 inputs): the forward "
            f"differs from the correctly rounded value at {self.strict_forward_differs} "
            f"inputs, the derivative at {self.strict_derivative_differs}; "
            + (
                f"the derivative is inf or NaN, where the exact one is finite, for x in "
                f"{_describe(broken)}."
                if broken
                else "it is never inf or NaN where the exact derivative is finite."
            )
        )
        return out


def _argmax_abs(values: np.ndarray) -> tuple[float, list[tuple[float, float]]]:
    """The largest magnitude of ``values`` over the finite halves, and the runs of inputs
    where it is attained (all of them, in increasing order of x)."""
    magnitude = np.where(FINITE, np.abs(values.astype(np.float64)), -1.0)
    largest = float(magnitude.max())
    return largest, intervals(magnitude == largest, zeros=True)


#: The positive finite halves in increasing order, as float64.
POSITIVE_HALVES = np.sort(ALL_HALVES[FINITE & (ALL_HALVES > 0)].astype(np.float64))


def smallest_half_at_least(bound: mpmath.mpf) -> float | None:
    """The smallest positive finite half >= ``bound`` (compared exactly), or None."""
    i = int(np.searchsorted(POSITIVE_HALVES, float(bound)))
    while i < POSITIVE_HALVES.size and POSITIVE_HALVES[i] < bound:
        i += 1
    while i > 0 and POSITIVE_HALVES[i - 1] >= bound:
        i -= 1
    return None if i >= POSITIVE_HALVES.size else float(POSITIVE_HALVES[i])


def _vjp_overflow_threshold(key: str, at: float) -> float | None:
    """The smallest half g with g |f'(at)| >= 65520, where ``at`` maximizes |f'| on halves."""
    gain = abs(evaluate(elementwise(key).derivative, at))
    with mpmath.workdps(50):
        return smallest_half_at_least(mpmath.mpf(HALF_OVERFLOW) / gain)


@cache
def float16_facts(key: str) -> Float16Facts:
    """The float16 facts of one catalog entry (tables are built once per process)."""
    module = elementwise(key)
    generated = importlib.import_module(f"kernels._generated.{key}")
    forward_rounded, _ = float16_values(module.forward)
    derivative_rounded, derivative_exact = float16_values(module.derivative)
    nonzero = FINITE & (ALL_HALVES != 0)
    forward_max, forward_at = _argmax_abs(forward_rounded)
    derivative_max, derivative_at = _argmax_abs(derivative_rounded)
    gain_at = float(ALL_HALVES[np.nanargmax(np.where(FINITE, np.abs(derivative_exact), -1))])

    def strict(quantity: str) -> np.ndarray:
        out = np.empty(1 << 16, dtype=np.uint16)
        getattr(generated, f"{quantity}_f16s_loop")(_ALL_BITS, out)
        return out.view(np.float16)

    def differs(got: np.ndarray, want: np.ndarray) -> int:
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        return int(np.count_nonzero(~same & FINITE))

    strict_forward, strict_derivative = strict("forward"), strict("derivative")
    return Float16Facts(
        key=key,
        forward_max=forward_max,
        forward_max_at=forward_at,
        forward_flush=intervals(nonzero & (forward_rounded == 0)),
        derivative_max=derivative_max,
        derivative_max_at=derivative_at,
        derivative_flush=intervals(FINITE & (derivative_rounded == 0)),
        vjp_overflow_g=_vjp_overflow_threshold(key, gain_at),
        strict_forward_differs=differs(strict_forward, forward_rounded),
        strict_derivative_differs=differs(strict_derivative, derivative_rounded),
        strict_derivative_nonfinite=intervals(
            FINITE & ~np.isfinite(strict_derivative) & np.isfinite(derivative_rounded)
        ),
    )
