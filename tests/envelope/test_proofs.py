"""The proofs of the max-norm gains behind ``liptable envelope`` (proofs/envelope.py): they
verify at the report's sizes and reject wrong constants."""

from __future__ import annotations

import pytest

from derive.envelope import modules as env
from proofs import envelope as proofs


@pytest.mark.parametrize("size", [2, 3, 57, 58, 64, 768, 4096, 8192])
def test_layernorm_gain_proof_verifies(size):
    verification = proofs.layernorm_gain_proof(size).verify()
    assert verification.ok, verification.summary()


@pytest.mark.parametrize("size", [1, 2, 4, 5, 768, 8192])
def test_rmsnorm_gain_proof_verifies(size):
    verification = proofs.rmsnorm_gain_proof(size).verify()
    assert verification.ok, verification.summary()


def test_transition_to_non_constant_rows_is_at_58():
    """K(D) = 2(D-1)/D (constant rows) exactly for D <= 57; a non-constant row wins from 58."""
    constant = [d for d in range(2, 80) if env.layernorm_k(d)[2].exact == 1]
    assert constant == list(range(2, 58)), f"constant-row sizes: {constant[-3:]}, expected ..57"


@pytest.mark.parametrize("size", [64, 768])
def test_a_wrong_k_is_rejected(monkeypatch, size):
    """The arb step fails when the claimed maximizer is not the best k."""
    _, k, _ = env.layernorm_k(size)
    wrong = env.k_value(size, k - 7)
    monkeypatch.setattr(proofs, "layernorm_k", lambda d: wrong)
    assert not proofs._best_k(size), f"k = {k - 7} accepted at D = {size} (true maximizer {k})"


def test_a_wrong_constant_is_not_attained(monkeypatch):
    """The attainment step compares the built input's column sum with the claimed K."""
    value, k, lam = env.layernorm_k(768)
    off = env.Real("K + 1e-20", lambda: value.ball() + env.arb(10) ** -20)
    monkeypatch.setattr(proofs, "layernorm_k", lambda d: (off, k, lam))
    assert not proofs._ln_attained(768), "a constant 1e-20 too large passed the attainment step"
