"""The catalog is the one list of modules: everything that lists modules agrees with it."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

import kernels
from derive import bench
from derive.catalog import CATALOG, FAMILIES, KEYS, SECTIONS, TOPICS, entry, family_of_claim
from derive.claims import CLAIMS
from derive.definitions.activations import ELEMENTWISE
from derive.report import document

ROOT = Path(__file__).resolve().parents[1]


def test_one_entry_per_module_of_table_2():
    assert len(KEYS) == len(set(KEYS)) == 19


@pytest.mark.parametrize("module", CATALOG, ids=KEYS)
def test_every_entry_has_its_kernel_and_family_files(module):
    kernel = importlib.import_module(module.kernel)
    assert callable(kernel.forward) and callable(kernel.vjp)
    assert module.key in kernels.__all__
    assert importlib.import_module(module.definition)
    for concern in ("definitions", "check"):
        assert (ROOT / "derive" / concern / f"{module.family}.py").exists(), concern
    assert (ROOT / "tests" / "check" / f"test_{module.family}.py").exists()


@pytest.mark.parametrize("topic", TOPICS, ids=[t.key for t in TOPICS])
def test_every_topic_has_its_family_files_and_no_kernel(topic):
    assert importlib.import_module(topic.definition)
    for concern in ("definitions", "check", "report"):
        assert (ROOT / "derive" / concern / f"{topic.family}.py").exists(), concern
    assert (ROOT / "proofs" / f"{topic.family}.py").exists()
    assert (ROOT / "tests" / "check" / f"test_{topic.family}.py").exists()
    assert topic.key not in kernels.__all__ and topic.key not in KEYS


def test_every_family_is_used():
    assert {m.family for m in (*CATALOG, *TOPICS)} == set(FAMILIES)


def test_every_claim_belongs_to_exactly_one_entry():
    for c in CLAIMS:
        owners = [m.key for m in (*CATALOG, *TOPICS) if c.key in m.claim_keys]
        assert len(owners) == 1, (c.id, owners)
        assert c.module in SECTIONS, c.id


def test_claim_keys_are_all_claimed():
    keys = {c.key for c in CLAIMS}
    assert {k for m in (*CATALOG, *TOPICS) for k in m.claim_keys} == keys


def test_topics_follow_the_modules_in_the_report():
    assert SECTIONS[-len(TOPICS) :] == tuple(t.key for t in TOPICS)
    assert family_of_claim("optimizers") == "theory"


def test_the_report_follows_the_catalog():
    assert document.MODULE_ORDER == SECTIONS
    assert [s for s in SECTIONS if s in KEYS] == list(KEYS)


def test_activations_are_the_elementwise_definitions():
    names = {m.name for m in ELEMENTWISE}
    assert names == {m.key for m in CATALOG if m.family == "activations"}
    for m in CATALOG:
        if m.variants:
            assert {e.variant for e in ELEMENTWISE if e.name == m.key} == set(m.variants)


def test_unknown_names_are_refused_with_the_known_ones():
    with pytest.raises(KeyError, match="known: linear, conv2d"):
        entry("nosuch")
    with pytest.raises(KeyError, match="nosuch"):
        family_of_claim("nosuch")


def test_the_benchmark_covers_every_module():
    names = [p.name.split(" ")[0] for p in bench.problems(np.float32)]
    assert sorted(set(names)) == sorted(KEYS)


def _first(outputs):
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


def test_the_benchmark_compares_like_with_like():
    """On a slice of each benchmark problem (float64), the NumPy version computes what the
    kernel computes: a benchmark against another function would mislead."""
    compared = 0
    for p in bench.problems(np.float64):
        small = p.small()
        ours = small.run()
        baseline = bench._numpy_baseline(small)
        if baseline is None:
            continue
        theirs = baseline()
        np.testing.assert_allclose(theirs[0], ours[0], rtol=1e-9, atol=1e-12, err_msg=p.name)
        np.testing.assert_allclose(
            _first(theirs[1]), _first(ours[1]), rtol=1e-9, atol=1e-12, err_msg=p.name
        )
        compared += 1
    assert compared >= 10


def test_the_torch_benchmark_compares_like_with_like():
    torch = pytest.importorskip("torch")
    for p in bench.problems(np.float64):
        small = p.small()
        ours = small.run()
        run = bench._torch_baseline(small, torch)
        assert run is not None, p.name
        y, grads = run()
        np.testing.assert_allclose(
            y.detach().numpy(), ours[0], rtol=1e-9, atol=1e-12, err_msg=p.name
        )
        np.testing.assert_allclose(
            grads[0].numpy(), _first(ours[1]), rtol=1e-9, atol=1e-12, err_msg=p.name
        )
