"""``liptable certify``: shards, the per-shard check, and a real Dask LocalCluster run."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from derive import certify
from derive.cli import main
from derive.definitions.activations import elementwise
from derive.digests import NOT_KERNELS
from derive.reference import products
from derive.reference.core import bfloat16_table, float16_table, reference_array
from derive.reference.formats import BFLOAT16
from derive.reference.products import vjp_reference


def test_shards_cover_the_format_once():
    for dtype in certify.FORMATS:
        runs = certify.shards(dtype)
        width = 8 * np.dtype(certify.FORMATS[dtype][1]).itemsize
        assert runs[0][0] == 0 and runs[-1][1] == 1 << width
        assert all(a[1] == b[0] for a, b in itertools.pairwise(runs))


def test_a_limit_spreads_over_both_signs_and_all_binades():
    runs = certify.shards("float32", limit=1_000_000)
    assert sum(b - a for a, b in runs) == 1_000_000
    assert len(runs) == certify.SPREAD
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs))  # no overlap
    starts = np.array([a for a, _ in runs], dtype=np.uint32).view(np.float32)
    assert (starts < 0).sum() >= 30 and (starts > 0).sum() >= 30
    with pytest.raises(ValueError, match="--shard"):
        certify.shards("float16", shard=4)


def test_the_kernel_passes_and_a_naive_one_is_caught():
    """sigmoid in float16 over one shard: the kernel is correctly rounded everywhere; a naive
    half-precision evaluation is not, and the listed inputs really are wrong."""
    start, stop = certify.shards("float16")[1]  # 16384 halves from 2^-1 upwards in magnitude
    good = certify.check_shard("sigmoid", "forward", "float16", start, stop)
    assert good["checked"] == stop - start - 1024  # less the 1024 infinities and NaNs
    assert good["not_correctly_rounded"] == 0 and good["zero_sign_mismatches"] == 0
    assert good["max_ulp"] == 0.0

    def naive(key, quantity, xs):
        with np.errstate(over="ignore"):
            return (np.float16(1) / (np.float16(1) + np.exp(-xs))).astype(np.float16)

    bad = certify.check_shard("sigmoid", "forward", "float16", start, stop, kernel=naive)
    assert bad["not_correctly_rounded"] > 0 and bad["max_ulp"] >= 1
    from derive.definitions.activations import SIGMOID
    from derive.reference.core import correctly_rounded

    for item in bad["listed"][:5]:
        assert naive("sigmoid", "forward", np.array([item["x"]], np.float16))[0] == item["got"]
        assert correctly_rounded(SIGMOID, item["x"], np.float16) == item["correctly_rounded"]
        assert item["got"] != item["correctly_rounded"]


def test_a_nan_result_is_strict_json():
    """A kernel that returns NaN where the value is finite: counted, listed as "nan", its
    distance "inf", and the shard's record is strict JSON."""

    def broken(key, quantity, xs):
        out = xs.astype(np.float32).copy()  # ReLU is x for x > 0 ...
        out[xs <= 0] = 0
        out[0] = np.nan  # ... but not at the first input
        return out

    start, stop = certify.shards("float32", shard=100)[0]
    shard = certify.check_shard("relu", "forward", "float32", start, stop, kernel=broken)
    assert shard["not_correctly_rounded"] == 1 and shard["max_ulp"] == "inf"
    assert shard["listed"][0]["got"] == "nan"
    json.dumps(shard, allow_nan=False)


def test_certify_on_a_local_cluster_writes_a_certificate_and_resumes(tmp_path, capsys):
    """The distributed path, end to end: a LocalCluster of two workers checks a float32 slice
    of Swish's derivative; a second run finds every shard done and computes none."""
    out = tmp_path / "swish.json"
    args = ["certify", "swish", "--dtype", "float32", "--quantity", "derivative"]
    args += ["--limit", "3000", "--workers", "2", "--out", str(out), "--state", str(tmp_path)]
    assert main(args) == 0
    first = json.loads(out.read_text())
    assert first["inputs_checked"] > 2900 and first["not_correctly_rounded"] == 0
    assert first["complete"] is False and first["shards"] == certify.SPREAD
    assert first["workers"] == 2 and first["inputs_per_second_per_core"] > 0
    assert set(first["projected_full_float32_hours"]) == {"2", "64"}
    assert "every input correctly rounded" in capsys.readouterr().out
    assert main(args) == 0
    again = json.loads(out.read_text())
    assert again["inputs_checked"] == first["inputs_checked"]
    assert again["inputs_per_second_per_core"] == 0  # nothing recomputed: resumed from state
    assert len(list(tmp_path.glob("swish.derivative.float32.*/*.json"))) == certify.SPREAD


def test_unknown_module_is_a_clear_error(capsys):
    assert main(["certify", "softmax", "--dtype", "float16"]) == 2
    assert "no elementwise module" in capsys.readouterr().err


def _slow_vjp_reference(key, x, g, dtype):
    """g f'(x) correctly rounded to the format, the product taken as one expression by the
    generic reference path (balls, then mpmath), not by vjp_reference's float64 product."""
    scaled = sp.piecewise_fold(sp.Rational(float(g)) * elementwise(key).derivative)
    return reference_array(scaled, np.array([x], dtype), dtype)[0]


#: Per format: its exhaustive table, pinned x and g (exact derivatives at 0 and in ReLU times
#: subnormal g at midpoints, the largest values, GeLU's underflowing tail).
_VJP_CASES = {
    "float16": (
        float16_table,
        [0.0, -0.0, 1.0, -3.0, 8.75, -40.0, 65504.0, -65504.0, 6e-8],
        [6e-8, -1.8e-7, 3e-7, 65504.0, -65504.0, 1.0, -0.0, 1024.0, 0.0],
    ),
    "bfloat16": (
        bfloat16_table,
        [0.0, -0.0, 1.0, -3.0, 8.75, -40.0, 3.3895e38, -3.3895e38, 1e-38, -1e20, -600.0],
        [2.0**-133, -3 * 2.0**-133, 1e-38, 3.3895e38, -3.3895e38, 1.0, -0.0, 1e30, 0.0],
    ),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("key", ["sigmoid", "gelu_none", "relu"])
def test_the_vjp_reference_is_the_correctly_rounded_product(key, dtype):
    """vjp_reference against the generic path, bit for bit (signed zeros included), at pairs
    that test each of its cases: exact derivatives (x = 0, ReLU) times subnormal g whose
    product is a midpoint, products that overflow or round to the largest value, GeLU's
    underflowing tail and products below half the smallest subnormal (signed zeros, x = -600
    in bfloat16), and random pairs."""
    table_of, xs, gs = _VJP_CASES[dtype]
    fmt = np.dtype(BFLOAT16 if dtype == "bfloat16" else dtype)
    rng = np.random.default_rng(7)
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(fmt)
    finite = values[np.isfinite(values.astype(np.float32))]
    pairs = [(x, g) for x in xs for g in gs]
    pairs += list(zip(rng.choice(finite, 60), rng.choice(finite, 60), strict=True))
    x = np.array([float(p[0]) for p in pairs]).astype(fmt)
    g = np.array([float(p[1]) for p in pairs]).astype(fmt)
    got = vjp_reference(elementwise(key).derivative, x, g)
    slope = table_of(elementwise(key).derivative).exact[x.view(np.uint16)]
    nonzero = (g.astype(np.float32) != 0) & (slope != 0)
    want = [
        _slow_vjp_reference(key, a, b, fmt) for a, b in zip(x[nonzero], g[nonzero], strict=True)
    ]
    assert got[nonzero].view(np.uint16).tolist() == np.array(want, fmt).view(np.uint16).tolist()
    # g = +-0 or f'(x) = +-0: a zero of IEEE's sign, sign(g) sign(f'(x)) (an exact product of
    # 0 has no sign of its own; the generic path gives +0)
    zeros = got[~nonzero].astype(np.float32)
    assert np.all(zeros == 0)
    signs = np.signbit(g[~nonzero].astype(np.float32)) ^ np.signbit(slope[~nonzero])
    assert np.array_equal(np.signbit(zeros), signs)


@pytest.mark.parametrize(
    ("key", "dtype", "xs", "gs"),
    [
        # GeLU'(x) = 1/2 + 0.798 x + ...: g d is g/2, a midpoint for odd subnormal g
        ("gelu_none", "bfloat16", [1e-30, -1e-30, 2.0**-130], [2.0**-133, -3 * 2.0**-133]),
        # sigmoid'(x) = 1/4 - x^2/16 + ...: g/4 is a midpoint for g = 6 2^-133, and the
        # side (below 1/4) is beyond the 2^-150 margin of the tables' balls
        ("sigmoid", "bfloat16", [1e-30, -(2.0**-126), 3e-20], [6 * 2.0**-133, -(2.0**-132)]),
        ("gelu_none", "float16", [6e-8, -1.2e-7], [2.0**-24, -3 * 2.0**-24]),
    ],
)
def test_pairs_at_a_rounding_boundary_are_settled_exactly(key, dtype, xs, gs, monkeypatch):
    """Products g d that land on (or within the error interval of) a rounding boundary are
    settled from the exact g d and the ball of f'(x), bit for bit as the generic path does,
    and without it (the generic path made them a million mpmath calls per module)."""
    fmt = np.dtype(BFLOAT16 if dtype == "bfloat16" else dtype)
    x = np.array([a for a in xs for _ in gs]).astype(fmt)
    g = np.array([b for _ in xs for b in gs]).astype(fmt)
    want = [_slow_vjp_reference(key, a, b, fmt) for a, b in zip(x, g, strict=True)]

    def refuse(*args, **kwargs):
        raise AssertionError("a boundary pair reached the generic path")

    monkeypatch.setattr(products, "reference_array", refuse)
    got = vjp_reference(elementwise(key).derivative, x, g)
    assert got.view(np.uint16).tolist() == np.array(want, fmt).view(np.uint16).tolist()


def test_vjp_pairs_shard_and_the_kernel_is_checked():
    """A VJP shard walks x's bits, then g's; the kernel passes and a kernel that rounds
    f'(x) to half before multiplying (as naive half code does) is caught."""
    start, stop = certify.shards("float16", shard=256, quantity="vjp")[0]  # x from -0.0 on
    assert stop - start == 1 << 23
    a, b = start, start + (1 << 20)  # x = -0.0 and the 15 negative subnormals after it
    good = certify.check_shard("sigmoid", "vjp", "float16", a, b)
    assert good["checked"] == 16 * (65536 - 2048)  # the non-finite g left out
    assert good["not_correctly_rounded"] == 0 and good["overflow_mismatches"] == 0

    def naive(key, xs, gs):
        from kernels import sigmoid

        return (gs * sigmoid.derivative(xs)).astype(np.float16)

    bad = certify.check_shard("sigmoid", "vjp", "float16", a, b, kernel=naive)
    assert bad["not_correctly_rounded"] > 0
    item = bad["listed"][0]
    assert item["got"] != item["correctly_rounded"]
    slow = _slow_vjp_reference("sigmoid", item["x"], item["g"], np.float16)
    assert slow == item["correctly_rounded"]


def test_a_vjp_shard_is_checked_in_pieces_and_merged_in_order():
    """A VJP shard is checked in pieces of certify._VJP_PIECE pairs (a part piece at the
    end): the counts are summed and the listed pairs are the shard's first wrong ones, in
    pattern order across the pieces."""
    start = certify.shards("float16", shard=300, quantity="vjp")[0][0]
    a, b = start, start + max(3 * certify._VJP_PIECE, 200_000) + 1000  # a part piece last

    def spoiled(key, xs, gs):  # NaN (never the reference of a finite pair) at g = 97 k
        out = certify._vjp_kernel(key, xs, gs)
        out[gs.view(np.uint16) % 97 == 0] = np.nan
        return out

    shard = certify.check_shard("sigmoid", "vjp", "float16", a, b, kernel=spoiled)
    patterns = np.arange(a, b, dtype=np.uint64)
    xs = (patterns >> np.uint64(16)).astype(np.uint16).view(np.float16)
    gs = (patterns & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
    finite = np.isfinite(xs) & np.isfinite(gs)
    wrong = finite & (gs.view(np.uint16) % 97 == 0)
    assert (shard["start"], shard["stop"]) == (a, b)
    assert shard["checked"] == int(finite.sum())
    assert shard["not_correctly_rounded"] == int(wrong.sum()) > certify.LISTED
    first = np.flatnonzero(wrong)[: certify.LISTED]
    assert first[-1] >= certify._VJP_PIECE  # the list runs on into the second piece
    assert [(item["x"], item["g"]) for item in shard["listed"]] == [
        (float(xs[i]), float(gs[i])) for i in first
    ]


def test_a_piece_lists_no_more_than_the_room_left_and_still_counts_everything():
    """Once a shard has listed LISTED inputs its later pieces list none (building the
    entries was most of a GeLU VJP shard's time where every pair was a zero-sign mismatch);
    their counts are whole."""
    start = certify.shards("float16", shard=300, quantity="vjp")[0][0]
    stop = start + certify._VJP_PIECE

    def spoiled(key, xs, gs):
        return np.full(xs.shape, np.nan, dtype=xs.dtype)

    for room in (0, 5):
        piece = certify._check_piece("sigmoid", "vjp", "float16", start, stop, spoiled, room)
        assert len(piece["listed"]) == room
        assert piece["not_correctly_rounded"] == piece["checked"] > room


def test_vjp_is_for_half_pairs_only(capsys):
    args = ["certify", "sigmoid", "--dtype", "float32", "--quantity", "vjp", "--limit", "10"]
    assert main(args) == 2
    assert "2^64" in capsys.readouterr().err


def test_the_files_left_out_of_the_kernel_digest_compute_nothing_the_kernels_use():
    """kernels/testing.py, pytest_plugin.py and torch.py may change without making the
    certificates older: they define no Numba function, and no kernel imports them."""
    root = Path(__file__).resolve().parents[1]
    for name in NOT_KERNELS:
        assert "@njit" not in (root / name).read_text(), name
    modules = {Path(name).stem for name in NOT_KERNELS}
    for path in (root / "kernels").rglob("*.py"):
        if str(path.relative_to(root)) in NOT_KERNELS:
            continue
        text = path.read_text()
        for module in modules:
            assert f"kernels.{module} import" not in text and f"import {module}\n" not in text, (
                path,
                module,
            )
