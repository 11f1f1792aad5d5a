"""The static error bounds the fast elementwise loops decide with (``proofs/static_bounds.py``,
``derive/codegen/static_bounds.json``): current, used only where current, and holding."""

from __future__ import annotations

import importlib
import zlib
from pathlib import Path

import numpy as np
import pytest

from derive.codegen import generate, static
from derive.definitions.activations import ELEMENTWISE
from proofs import static_bounds

BOUNDED = [m.key for m in ELEMENTWISE if generate.bounded(m)]
RECORDS = static.load()
USED = [r for r in RECORDS if static.usable(r)]


def test_every_bounded_form_has_a_current_record():
    """A record whose digest no longer matches its form would silently stop being used (the
    generator falls back to the running bound): rerun ``liptable prove-bounds``."""
    found = {(r.module, r.quantity): r for r in RECORDS}
    for key in BOUNDED:
        for quantity in ("forward", "derivative"):
            record = found.get((key, quantity))
            assert record is not None, (key, quantity)
            source = static_bounds.fe_source(key, quantity)
            assert record.digest == static.form_digest(source), (key, quantity)
            assert record.inputs == 2**32 - 2**24  # every finite float32


@pytest.mark.parametrize("key", BOUNDED)
def test_the_loops_use_exactly_the_usable_records(key):
    text = Path(importlib.import_module(f"kernels._generated.{key}").__file__).read_text()
    for quantity in ("forward", "derivative"):
        record = next(r for r in RECORDS if (r.module, r.quantity) == (key, quantity))
        used = f"def {quantity}_static(x, v):" in text
        assert used == static.usable(record), (key, quantity)
        if used:
            assert f"decided_float32(v, {quantity}_static(w, v))" in text


def _slices(seed: int, n: int) -> list[int]:
    """Starts of ``n`` random slices of 2^18 float32 bit patterns, and the slices around 0,
    1, the largest finite values and the smallest normals, both signs."""
    rng = np.random.default_rng(seed)
    starts = [int(s) for s in rng.integers(0, 2**32 - 2**18, n)]
    for bits in (0x00000000, 0x00800000, 0x3F800000, 0x7F7C0000):
        starts += [bits, bits | 0x80000000]
    return starts


@pytest.mark.parametrize("record", USED, ids=[f"{r.module}.{r.quantity}" for r in USED])
def test_the_static_bound_holds_on_float32_slices(record):
    """The committed constant, rechecked on 36 slices of 2^18 inputs (the full enumeration
    is ``liptable prove-bounds``)."""
    for start in _slices(zlib.crc32(record.module.encode()), 28):
        failed, where, _ = static_bounds.violations(
            record.module,
            record.quantity,
            start,
            2**18,
            record.relative,
            record.absolute,
            record.limit,
        )
        assert failed == 0, (record.module, record.quantity, hex(start), where)


def test_a_constant_too_small_is_caught():
    """The check can fail: an eighth of sigmoid's proven constant is exceeded somewhere in
    the binade [1, 2), and the proof of a slice picks the constant back up."""
    record = next(r for r in RECORDS if (r.module, r.quantity) == ("sigmoid", "forward"))
    failed, where, inside = static_bounds.violations(
        "sigmoid",
        "forward",
        0x3F800000,
        2**23,
        record.relative / 8,
        record.absolute,
        record.limit,
    )
    assert failed > 0 and 1.0 <= where < 2.0 and inside == 2**23
    proven = static_bounds.prove("sigmoid", "forward", first=0x3F800000, count=2**23)
    assert proven.relative <= record.relative and proven.inputs == 2**23


def test_a_stale_record_is_not_used(monkeypatch):
    """A record proven for other code (another digest) leaves the loops on the running
    bound."""
    stale = [static.StaticBound(**{**vars(r), "digest": "0" * 64}) for r in RECORDS]
    monkeypatch.setattr(static, "load", lambda: stale)
    text = generate.generate_source(next(m for m in ELEMENTWISE if m.key == "sigmoid"))
    assert "_static(" not in text
    assert "y, ok = decided_float32(v, e)" in text


def test_a_loose_record_is_not_used(monkeypatch):
    loose = [static.StaticBound(**{**vars(r), "relative": 2.0**-30}) for r in RECORDS]
    monkeypatch.setattr(static, "load", lambda: loose)
    source = static_bounds.fe_source("sigmoid", "forward")
    assert static.current("sigmoid", "forward", source) is None
