"""Per-tensor scaling for FP8: how fast a tensor's amax may grow before a scaled cast
overflows.

A tensor ``x_t`` (step t, amax ``a_t = max|x_t|``) is cast as ``x_t * s_t`` to a format
whose largest finite value is ``M``. The recipes (as in NVIDIA's Transformer Engine):

- **current scaling**: ``s_t = M / (2^margin a_t)``, from the tensor itself: ``a_t s_t =
  M / 2^margin <= M``, so the cast never overflows;
- **delayed scaling**: ``s_t = M / (2^margin H_t)`` with ``H_t`` the largest amax of the last
  ``history`` steps (or the most recent one): the scale lags the tensor.

With delayed scaling, step t overflows when ``a_t s_t`` reaches the format's overflow
threshold ``T`` (``>= T``; ``> T`` for E4M3, whose midpoint ``T = 464`` rounds to 448), that
is when ``a_t / H_t`` reaches ``R = 2^margin T / M``. Since ``H_t >= a_{t-1}`` whatever the
history, a per-step growth ``a_t / a_{t-1}`` below ``R`` (at most ``R`` for E4M3) never
overflows, and a tensor that grows by more than ``R`` in one step after ``history`` steady
steps overflows at that step: ``R`` is the exact limit, for every history length. All in
exact arithmetic (the scale itself is taken as exact).

>>> from derive.envelope.core import FORMATS
>>> growth_limit(FORMATS["float8_e4m3fn"], Recipe("delayed", history=16, margin=0))
Fraction(29, 28)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from derive.envelope.core import Format

RECIPES = ("current", "delayed")


@dataclass(frozen=True)
class Recipe:
    """A per-tensor scaling recipe: ``kind`` (current or delayed), the amax ``history``
    length and the ``margin`` (the scale is divided by ``2^margin``)."""

    kind: str = "delayed"
    history: int = 16
    margin: int = 0

    def __post_init__(self) -> None:
        if self.kind not in RECIPES:
            raise ValueError(f"scaling: expected one of {RECIPES}, got {self.kind!r}")
        if int(self.history) != self.history or self.history < 1:
            raise ValueError(f"history: expected a positive integer, got {self.history!r}")
        if int(self.margin) != self.margin or self.margin < 0:
            raise ValueError(f"margin: expected an integer >= 0, got {self.margin!r}")


def growth_limit(fmt: Format, recipe: Recipe) -> Fraction | None:
    """``R = 2^margin T / M``: per-step growths of amax below it (at most it, for a strict
    overflow) never overflow the cast; None for current scaling (no growth overflows)."""
    if recipe.kind == "current":
        return None
    return Fraction(2) ** recipe.margin * fmt.overflow / fmt.max_finite


def overflows(fmt: Format, recipe: Recipe, amax: list[Fraction]) -> int | None:
    """The first step whose scaled amax overflows under ``recipe`` for the amax sequence
    ``amax`` (step 0 has no history and is scaled by its own amax), or None."""
    for t, a in enumerate(amax):
        if recipe.kind == "current" or t == 0:
            reference = a
        else:
            reference = max(amax[max(0, t - recipe.history) : t])
        if reference == 0:
            continue
        scaled = a * fmt.max_finite / (Fraction(2) ** recipe.margin * reference)
        if scaled > fmt.overflow or (scaled == fmt.overflow and not fmt.strict_overflow):
            return t
    return None


def growth_witness(fmt: Format, recipe: Recipe, growth: Fraction) -> list[Fraction]:
    """``history`` steady steps of amax 1, then one step of amax ``growth``."""
    return [Fraction(1)] * recipe.history + [Fraction(growth)]


def lines(fmt: Format, recipe: Recipe) -> list[str]:
    """What ``liptable envelope --scaling`` prints."""
    if recipe.kind == "current":
        return [
            f"scaling: current (margin {recipe.margin}): each cast is scaled by its own "
            f"amax, so |x s| <= {float(fmt.max_finite):g}/2^{recipe.margin}: it never "
            "overflows, for any growth."
        ]
    limit = growth_limit(fmt, recipe)
    relation = "at most" if fmt.strict_overflow else "below"
    # the largest growth shown safe, and one just past the limit
    safe = limit if fmt.strict_overflow else limit * Fraction(1023, 1024)
    unsafe = limit * Fraction(1025, 1024) if fmt.strict_overflow else limit
    safe_at, unsafe_at = (
        overflows(fmt, recipe, growth_witness(fmt, recipe, g)) for g in (safe, unsafe)
    )
    return [
        f"scaling: delayed, amax history {recipe.history}, margin {recipe.margin}: the scale "
        f"is {float(fmt.max_finite):g} / (2^{recipe.margin} max of the last {recipe.history} "
        f"amax); a per-step amax growth {relation} 2^{recipe.margin} x "
        f"{float(fmt.overflow):g}/{float(fmt.max_finite):g} = {float(limit):.10g} never "
        "overflows, for any history length.",
        f"  witness: {recipe.history} steps of amax 1, then amax {float(safe):.10g}: "
        + ("no overflow" if safe_at is None else "OVERFLOWS")
        + f"; then amax {float(unsafe):.10g}: "
        + ("overflows at that step." if unsafe_at is not None else "NO OVERFLOW."),
    ]
