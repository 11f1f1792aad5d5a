"""``liptable bench``'s GEMM column (the float64 GEMM rate and the flops it is divided into),
its module filter and its interleaving, and the memory it keeps for the timed calls."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import numpy as np
import pytest

from derive import bench
from derive.catalog import CATALOG

GEMM_BOUND = ("linear", "conv2d", "attention", "residual")


def _problems() -> dict[str, bench.Problem]:
    """The first problem of each name (the row families run at each of ROW_SHAPES)."""
    first: dict[str, bench.Problem] = {}
    for p in bench.problems(np.float32):
        first.setdefault(p.name, p)
    return first


def test_gemm_bound_modules_count_flops_and_the_others_do_not():
    problems = _problems()
    for m in CATALOG:
        counted = [p for name, p in problems.items() if name.split(" ")[0] == m.key]
        for p in counted:
            gemm_bound = m.bench in GEMM_BOUND or m.key == "weightnorm"
            assert (p.flops > 0) == gemm_bound, p.name
            assert not (p.flops and p.memory_bound), p.name


def test_a_module_filter_keeps_those_modules_and_their_data():
    """``liptable bench relu softmax`` times the same arrays the full table times."""
    every = bench.problems(np.float32)
    chosen = bench.problems(np.float32, modules=("relu", "softmax"))
    assert [(p.name, p.shape) for p in chosen] == [
        (p.name, p.shape) for p in every if p.name in ("relu", "softmax")
    ]
    kept = {(p.name, p.shape): p for p in every}
    for p in chosen:
        assert np.array_equal(p.x, kept[p.name, p.shape].x)
        assert np.array_equal(p.g, kept[p.name, p.shape].g)
    with pytest.raises(ValueError, match="no catalog module nosuch"):
        bench.problems(np.float32, modules=("relu", "nosuch"))


def test_flop_counts_are_the_products_of_forward_and_vjp():
    problems = _problems()
    assert problems["linear"].flops == 3 * 2 * 4096 * 1024 * 1024
    assert problems["weightnorm"].flops == 3 * 2 * 4096 * 1024 * 1024
    assert problems["conv2d"].flops == 3 * 2 * 8 * 64 * (64 * 3 * 3) * 56 * 56
    n, d = 512, 64
    # Q, K, V twice, S twice, then P V, P^T G, G V^T, dS K, dS^T Q, and the 6 projections
    products = 12 * (2 * n * d * d) + 7 * (2 * n * n * d)
    assert problems["dp_attention"].flops == problems["scs_attention"].flops == products
    ffn = 2 * 4096 * 256 * 1024
    assert problems["residual"].flops == 7 * ffn
    assert problems["weighted_residual"].flops == 8 * ffn


def test_dgemm_rate_is_a_rate():
    rate = bench.dgemm_rate((64, 32, 16), passes=2)
    assert np.isfinite(rate) and rate > 0


def test_interleaved_times_the_reference_in_the_same_passes():
    calls = []
    mine, base, ref = bench._interleaved(
        lambda: calls.append("ours"), None, 3, lambda: calls.append("gemm"), settle=0.0
    )
    assert calls == ["ours", "gemm"] * 3
    assert base is None and mine >= 0 and ref >= 0
    assert bench._interleaved(lambda: None, lambda: None, 2, settle=0.0)[2] is None


def test_interleaved_takes_turns_at_going_first():
    calls = []
    ours, theirs = lambda: calls.append("ours"), lambda: calls.append("theirs")
    bench._interleaved(ours, theirs, 4, settle=0.0)
    assert calls == ["ours", "theirs", "theirs", "ours"] * 2


def test_each_timing_follows_untimed_calls_of_the_same_function():
    """With ``settle``, a side runs untimed for that long (at least once) before its timed
    call, so the other side's spinning threads have time to stop; the timed call is the
    last of its run, and the sides still take turns."""
    calls = []

    def side(name):
        def run():
            calls.append((name, time.perf_counter()))
            time.sleep(0.002)

        return run

    bench._interleaved(side("ours"), side("theirs"), 2, settle=0.02)
    names = [name for name, _ in calls]
    runs = [name for name, _ in itertools.groupby(names)]
    assert runs == ["ours", "theirs", "ours"]  # ours, theirs | theirs, ours
    first_theirs = names.index("theirs")
    assert first_theirs >= 2  # ours ran untimed first, then its timed call
    assert calls[first_theirs - 1][1] - calls[0][1] >= 0.02


FAULTS = """
import resource, sys
import numpy as np
from derive import bench

kept = bench.keep_freed_memory() if sys.argv[1] == "keep" else None
size = 6 << 20  # 24 MB of float32: above glibc's default mmap threshold, below KEEP_BELOW
a = np.ones(size, np.float32)
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(size, np.float32)
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt and minor page faults")
def test_kept_memory_is_reused_without_page_faults():
    """With freed memory kept, a second 24 MB array takes the pages the first one freed;
    with the allocator's defaults it faults in new ones (at least 12, one per 2 MB huge
    page; hundreds with 4 KB pages)."""

    def faults(mode: str) -> tuple[str, int]:
        done = subprocess.run(
            [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True
        )
        kept, count = done.stdout.split()
        return kept, int(count)

    kept, with_kept = faults("keep")
    assert kept == "True"
    assert with_kept <= 2, with_kept
    assert faults("default")[1] >= 12
