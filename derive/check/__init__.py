"""The claim checker: each claim's verdict, derived from the definitions and the proofs.

Verdicts (:class:`proofs.core.Verdict`, SPEC): ``holds`` (true as stated; a bound
attained), ``holds_loose`` (a valid, not tight, bound), ``fails`` (false as stated, with a
counterexample), ``misprinted`` (wrong as printed, evident intent holds) and ``approx`` (a
"≈" statement whose worst relative error over everything it leaves free is below 1/10: the
exact value and that error; from 1/10 on it ``fails``, :data:`derive.check.core.APPROX_LIMIT`).
No verdict is typed in: each
follows from a comparison whose proof steps are run, and a step that does not check raises
:class:`proofs.core.UnprovenError` instead of reporting.

One file per family (:data:`derive.catalog.FAMILIES`) decides its claims; ``core`` holds
what they share. :func:`check` dispatches by the catalog.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from derive.catalog import family_of_claim
from derive.check.activations import check_activation
from derive.check.attention import check_attention
from derive.check.batchnorm import check_batchnorm
from derive.check.core import DIGITS, Result, decimal
from derive.check.descent import check_descent
from derive.check.initialization import check_initialization
from derive.check.norms import check_norm
from derive.check.rows import check_row
from derive.check.theory import check_theory
from derive.check.updates import check_updates
from derive.claims import CLAIMS, Claim
from proofs.core import UnprovenError

__all__ = ["DIGITS", "Result", "UnprovenError", "check", "check_all", "decimal"]

#: Each family's checker.
CHECKERS: dict[str, Callable[[Claim], Result]] = {
    "activations": check_activation,
    "attention": check_attention,
    "batchnorm": check_batchnorm,
    "norms": check_norm,
    "rows": check_row,
    "theory": check_theory,
    "initialization": check_initialization,
    "descent": check_descent,
    "updates": check_updates,
}


@cache
def check(c: Claim) -> Result:
    """The verdict of one claim, with its evidence (steps are run before returning)."""
    return CHECKERS[family_of_claim(c.key)](c)


def check_all() -> tuple[Result, ...]:
    """Every claim of :data:`derive.claims.CLAIMS`, in order."""
    return tuple(check(c) for c in CLAIMS)
