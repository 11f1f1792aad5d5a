"""The stable forms the kernels evaluate are admitted only with a proof of equality."""

from __future__ import annotations

import pytest
import sympy as sp

from derive.codegen.activations import STABLE_FORMS, StableForm, proves
from derive.definitions.activations import elementwise, x


@pytest.mark.parametrize("form", STABLE_FORMS, ids=lambda f: f"{f.key}.{f.quantity}")
def test_every_stable_form_is_proven_equal(form):
    assert proves(form), f"{form.key}.{form.quantity}: {form.expr} != {form.target()}"


def test_every_module_has_both_forms():
    pairs = {(f.key, f.quantity) for f in STABLE_FORMS}
    for key in ("sigmoid", "relu", "swish", "gelu_none", "gelu_tanh", "gelu_sigmoid"):
        assert {(key, "forward"), (key, "derivative")} <= pairs, key


@pytest.mark.parametrize(
    "key, quantity, wrong",
    [
        (
            "sigmoid",
            "forward",
            sp.Piecewise((1 / (1 + sp.exp(-x)), x >= 0), (1 / (1 + sp.exp(x)), True)),
        ),
        ("swish", "derivative", sp.exp(-x) / (1 + sp.exp(-x)) ** 2),
        ("gelu_none", "forward", x * sp.erfc(x / sp.sqrt(2), evaluate=False) / 2),
        ("relu", "derivative", sp.Piecewise((1, x >= 0), (0, True))),
    ],
)
def test_a_wrong_form_is_refused(key, quantity, wrong):
    assert not proves(StableForm(key, quantity, wrong, "deliberately wrong"))


def test_erfc_form_keeps_its_argument_sign():
    """SymPy canonicalizes erfc(-z) to 2 - erfc(z), the cancellation the form avoids."""
    form = next(f for f in STABLE_FORMS if (f.key, f.quantity) == ("gelu_none", "forward"))
    assert form.expr.has(sp.erfc(-x / sp.sqrt(2), evaluate=False))
    assert elementwise("gelu_none").forward.has(sp.erf)
