"""``liptable certify``: an elementwise kernel checked at every input of a format, on Dask.

The kernel's forward or derivative (mixed mode for float16 and bfloat16) is compared, input
by input, with the correctly rounded reference of :mod:`derive.reference` (python-flint
balls, mpmath where they cannot decide): for float16 and bfloat16 the exhaustive tables,
for float32 the references computed shard by shard. The VJP ``g * f'(x)`` of float16 is
and of bfloat16 is compared at every pair of finite values (x, g) with the correctly rounded product
(:func:`derive.reference.products.vjp_reference`). The inputs
are the bit patterns of the format (of a pair: x's bits, then g's), cut into contiguous
shards; every shard is one task on a Dask distributed cluster (a ``LocalCluster`` of one
single-threaded worker process per core by default, or the scheduler at ``--scheduler``).
Finished shards are kept as JSON files in a state folder (:func:`default_state`, or
``--state``) under a name made of the kernel's source digest (its module and the files of
``kernels/`` it imports, :func:`derive.digests.kernel_digest`) and the references', so an
interrupted run resumes where it stopped and a changed kernel starts afresh.

A certificate records the module, quantity, format, source digests, the shards and inputs
checked, the inputs whose result is not the correctly rounded value (counted, and listed up
to :data:`LISTED`), the largest distance from the correctly rounded value in units of the
format's spacing there, overflow mismatches, zeros of the wrong sign, and the wall time and
throughput (with the projected time of the full float32 run on 2 and on 64 cores).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from distributed import Client, LocalCluster, as_completed

from derive.definitions.activations import elementwise
from derive.digests import kernel_digest, reference_digest
from derive.progress import Progress
from derive.reference.core import bfloat16_table, float16_table, reference_array
from derive.reference.formats import BFLOAT16, finfo
from derive.reference.products import vjp_reference
from kernels._grain import one_thread

__all__ = [
    "FORMATS",
    "LISTED",
    "Certificate",
    "certify",
    "check_shard",
    "shards",
]

#: The formats certify knows: (dtype, unsigned view, bits per shard).
FORMATS = {
    "float16": (np.float16, np.uint16, 14),
    "bfloat16": (BFLOAT16.type, np.uint16, 14),
    "float32": (np.float32, np.uint32, 18),
}
QUANTITIES = ("forward", "derivative", "vjp")
#: The VJP's inputs are pairs (x, g) of 16-bit patterns, 2^23 pairs per shard.
VJP_DTYPES = ("float16", "bfloat16")
_VJP_SHARD_BITS = 23

#: Inputs listed by value in a certificate (all are counted).
LISTED = 1000

#: A --limit slice visits at least this many runs spread over the format.
SPREAD = 64


def finite_inputs(dtype: str, quantity: str = "forward") -> int:
    """Finite inputs of the format: 2^16 - 2^11 for float16, 2^32 - 2^24 for float32; for
    the VJP the pairs of finite values, (2^16 - 2^11)^2 for float16."""
    info = finfo(FORMATS[dtype][0])
    width = 8 * info.dtype.itemsize
    values = (1 << width) - (1 << (info.nmant + 1))
    return values * values if quantity == "vjp" else values


def _space(dtype: str, quantity: str) -> tuple[int, int]:
    """(bits of an input's pattern, bits per shard): a pair's pattern for the VJP."""
    _, unsigned, bits = FORMATS[dtype]
    width = 8 * np.dtype(unsigned).itemsize
    return (2 * width, _VJP_SHARD_BITS) if quantity == "vjp" else (width, bits)


def shards(
    dtype: str, limit: int | None = None, shard: int | None = None, quantity: str = "forward"
) -> list[tuple[int, int]]:
    """The ``(start, stop)`` bit-pattern ranges to check (for the VJP, of pairs: x's bits
    times 2^16 plus g's).

    All of them by default; with ``shard`` only that one; with ``limit`` exactly ``limit``
    patterns, in at least :data:`SPREAD` runs at evenly spaced starts across the format
    (both signs, every binade), none longer than a shard.

    >>> shards("float16")
    [(0, 16384), (16384, 32768), (32768, 49152), (49152, 65536)]
    >>> shards("float32", limit=4)
    [(0, 1), (1431655765, 1431655766), (2863311530, 2863311531), (4294967295, 4294967296)]
    >>> len(shards("float16", quantity="vjp")), shards("float16", shard=3, quantity="vjp")
    (512, [(25165824, 33554432)])
    """
    width, bits = _space(dtype, quantity)
    size, count = 1 << bits, 1 << (width - bits)
    if shard is not None:
        if not 0 <= shard < count:
            raise ValueError(f"--shard: expected 0 to {count - 1} for {dtype}, got {shard}")
        return [(shard * size, (shard + 1) * size)]
    if limit is None:
        return [(i * size, (i + 1) * size) for i in range(count)]
    if limit < 1:
        raise ValueError(f"--limit: expected at least 1 input, got {limit}")
    limit = min(limit, 1 << width)
    runs = max(min(SPREAD, limit), math.ceil(limit / size))
    lengths = [limit // runs + (i < limit % runs) for i in range(runs)]
    last = (1 << width) - lengths[-1]
    starts = [i * last // max(runs - 1, 1) for i in range(runs)]
    return [(a, a + n) for a, n in zip(starts, lengths, strict=True)]


def _expression(key: str, quantity: str):
    return getattr(elementwise(key), quantity)


def _kernel(key: str, quantity: str, xs: np.ndarray) -> np.ndarray:
    """The public kernel (``kernels.gelu`` with ``approximate`` for the GeLU forms)."""
    module = elementwise(key)
    function = getattr(importlib.import_module(f"kernels.{module.name}"), quantity)
    return function(xs, module.variant) if module.variant else function(xs)


def _vjp_kernel(key: str, xs: np.ndarray, gs: np.ndarray) -> np.ndarray:
    """The public kernel's VJP (mixed mode for float16)."""
    module = elementwise(key)
    function = importlib.import_module(f"kernels.{module.name}").vjp
    return function(xs, gs, module.variant) if module.variant else function(xs, gs)


def _reference(key: str, quantity: str, xs: np.ndarray) -> np.ndarray:
    expr = _expression(key, quantity)
    if xs.dtype == np.float16:
        return float16_table(expr).lookup(xs)
    if xs.dtype == BFLOAT16:
        return bfloat16_table(expr).lookup(xs)
    return reference_array(expr, xs, xs.dtype)


def _number(value: float) -> float | str:
    """A JSON number, or "nan", "inf", "-inf" (strict JSON has no such numbers)."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


#: Pairs per piece of a VJP shard. The reference's and the comparison's temporaries (a
#: dozen float64 arrays, 64 KiB each) stay in the core's cache and below glibc's mmap
#: threshold, which Dask's workers fix at its default of 128 KiB by setting
#: ``MALLOC_TRIM_THRESHOLD_``: a larger array is mapped and faulted in afresh every time.
#: One GeLU-sigmoid float16 shard: whole (2^23 pairs, mapped in any case) 1.20 s user +
#: 1.20 s system; with that setting, pieces of 2^16 1.07 + 0.94 s, of 2^13 1.40 + 0.01 s
#: (without it, pieces of 2^16 1.02 + 0.30 s). Each piece calls the kernel
#: on the calling thread only: with Numba's pool of two threads in each of two workers on
#: two cores, the pools spun against each other after every call (two processes at once:
#: 3.1-3.7 s per Sigmoid float16 shard, 2.1-2.2 s on one thread each).
_VJP_PIECE = 1 << 13


def check_shard(key: str, quantity: str, dtype: str, start: int, stop: int, kernel=None) -> dict:
    """The kernel against the correctly rounded references at the finite inputs whose bit
    patterns lie in ``[start, stop)``. ``kernel(key, quantity, xs)`` replaces the kernel
    (for tests). Returns the shard's counts and listed inputs as a JSON-ready dict."""
    began = time.perf_counter()
    piece = _VJP_PIECE if quantity == "vjp" else stop - start
    with one_thread():  # a worker is one core: no second Numba thread to spin
        parts = []
        room = LISTED  # inputs still to list: a shard lists its first LISTED, in order
        for a in range(start, stop, piece):
            parts.append(_check_piece(key, quantity, dtype, a, min(a + piece, stop), kernel, room))
            room -= len(parts[-1]["listed"])
    return {
        "start": start,
        "stop": stop,
        "checked": sum(p["checked"] for p in parts),
        "not_correctly_rounded": sum(p["not_correctly_rounded"] for p in parts),
        "zero_sign_mismatches": sum(p["zero_sign_mismatches"] for p in parts),
        "overflow_mismatches": sum(p["overflow_mismatches"] for p in parts),
        "max_ulp": _number(max((p["max_ulp"] for p in parts), default=0.0)),
        "listed": [item for p in parts for item in p["listed"]][:LISTED],
        "seconds": time.perf_counter() - began,
    }


def _check_piece(
    key: str, quantity: str, dtype: str, start: int, stop: int, kernel, room: int
) -> dict:
    """:func:`check_shard` on ``[start, stop)``, its largest distance a float, listing at
    most ``room`` inputs (building the entries cost about 60% of a GeLU VJP shard where every
    pair is a zero-sign mismatch, when each piece listed LISTED)."""
    float_type, unsigned, _ = FORMATS[dtype]
    patterns = np.arange(start, stop, dtype=np.uint64)
    gs = None
    if quantity == "vjp":
        xs = (patterns >> np.uint64(16)).astype(unsigned).view(float_type)
        gs = (patterns & np.uint64(0xFFFF)).astype(unsigned).view(float_type)
        with np.errstate(invalid="ignore"):  # a bfloat16 signaling NaN widened to test it
            keep = np.isfinite(xs) & np.isfinite(gs)
        xs, gs = xs[keep], gs[keep]
        got = (kernel or _vjp_kernel)(key, xs, gs)
        want = vjp_reference(_expression(key, "derivative"), xs, gs)
    else:
        xs = patterns.astype(unsigned).view(float_type)
        with np.errstate(invalid="ignore"):
            xs = xs[np.isfinite(xs)]
        got = (kernel or _kernel)(key, quantity, xs)
        want = _reference(key, quantity, xs)
    with np.errstate(invalid="ignore", over="ignore"):
        both_nan = np.isnan(got) & np.isnan(want)
        wrong = ~((got == want) | both_nan)
        sign = (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))
        overflow = np.isinf(got) != np.isinf(want)
        finite = np.isfinite(got) & np.isfinite(want)
        spacing = np.spacing(np.abs(want).astype(float_type)).astype(np.float64)
        distance = np.where(
            finite, np.abs(got.astype(np.float64) - want.astype(np.float64)) / spacing, np.inf
        )
    distance[~wrong] = 0.0
    listed = [
        {
            "x": float(xs[i]),
            "bits": f"0x{int(xs[i : i + 1].view(unsigned)[0]):0{2 * xs.itemsize}x}",
            **({} if gs is None else {"g": float(gs[i])}),
            "got": _number(got[i]),
            "correctly_rounded": _number(want[i]),
        }
        for i in np.flatnonzero(wrong | sign)[:room]
    ]
    return {
        "checked": int(xs.size),
        "not_correctly_rounded": int(wrong.sum()),
        "zero_sign_mismatches": int(sign.sum()),
        "overflow_mismatches": int(overflow.sum()),
        "max_ulp": float(distance.max(initial=0.0)),
        "listed": listed,
    }


def default_state() -> Path:
    """Where finished shards are kept: ``$XDG_CACHE_HOME/liptable/certify`` (by default
    ``~/.cache/liptable/certify``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "liptable" / "certify"


@dataclass
class Certificate:
    """The outcome of one ``certify`` run (see the module docstring); ``as_dict`` is the
    JSON written to disk."""

    module: str
    quantity: str
    dtype: str
    kernel_sha256: str
    reference_sha256: str
    shards: int
    inputs_checked: int
    complete: bool
    not_correctly_rounded: int
    zero_sign_mismatches: int
    overflow_mismatches: int
    max_ulp: float
    listed: list
    wall_seconds: float
    workers: int
    computed_inputs: int
    compute_seconds: float

    def as_dict(self) -> dict:
        per_core = self.throughput()
        full = finite_inputs(self.dtype, self.quantity)
        return {
            "module": self.module,
            "quantity": self.quantity,
            "dtype": self.dtype,
            "kernel_sha256": self.kernel_sha256,
            "reference_sha256": self.reference_sha256,
            "complete": self.complete,
            "shards": self.shards,
            "inputs_checked": self.inputs_checked,
            "finite_inputs_of_format": full,
            "not_correctly_rounded": self.not_correctly_rounded,
            "zero_sign_mismatches": self.zero_sign_mismatches,
            "overflow_mismatches": self.overflow_mismatches,
            "max_ulp_from_correctly_rounded": _number(self.max_ulp),
            "inputs_not_correctly_rounded": self.listed,
            "wall_seconds": round(self.wall_seconds, 3),
            "workers": self.workers,
            "compute_seconds": round(self.compute_seconds, 3),
            "inputs_per_second_per_core": round(per_core, 1),
            "projected_full_float32_hours": {
                str(cores): round(finite_inputs("float32") / (per_core * cores) / 3600, 3)
                for cores in (2, 64)
            }
            if per_core and self.dtype == "float32" and self.quantity != "vjp"
            else None,
        }

    def throughput(self) -> float:
        """Inputs per second per core: the inputs of the shards computed in this run over the
        seconds their tasks took (the cluster's start and the workers' imports excluded)."""
        if not self.computed_inputs or self.compute_seconds <= 0:
            return 0.0
        return self.computed_inputs / self.compute_seconds

    def lines(self) -> list[str]:
        d = self.as_dict()
        verdict = (
            "every input correctly rounded"
            if not (self.not_correctly_rounded or self.zero_sign_mismatches)
            else f"{self.not_correctly_rounded} inputs not correctly rounded, "
            f"{self.zero_sign_mismatches} zeros of the wrong sign"
        )
        out = [
            f"{self.module}.{self.quantity} {self.dtype}: {self.inputs_checked:,} inputs "
            f"({'all' if self.complete else 'a slice'} of {d['finite_inputs_of_format']:,} "
            f"finite) in {self.shards} shards: {verdict}; max {self.max_ulp:.3g} ULP from the "
            f"correctly rounded value; {self.overflow_mismatches} overflow mismatches",
            f"{self.wall_seconds:.1f} s on {self.workers} workers; "
            f"{d['inputs_per_second_per_core']:,.0f} inputs/s per core in the shards' tasks",
        ]
        if d["projected_full_float32_hours"]:
            hours = d["projected_full_float32_hours"]
            out.append(
                f"projected full float32 run: {hours['2']:.2f} h on 2 cores, "
                f"{hours['64']:.3f} h on 64"
            )
        return out


def _cluster(scheduler: str | None, workers: int):
    if scheduler:
        return Client(scheduler), None
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        env={"NUMBA_NUM_THREADS": "1"},
    )
    return Client(cluster), cluster


def certify(
    module: str,
    quantity: str,
    dtype: str,
    *,
    limit: int | None = None,
    shard: int | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    state: Path | None = None,
) -> Certificate:
    """Run the shards (skipping those already in ``state``) and sum them up."""
    elementwise(module)  # a KeyError naming the known modules
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity: expected one of {QUANTITIES}, got {quantity!r}")
    if dtype not in FORMATS:
        raise ValueError(f"--dtype: expected one of {sorted(FORMATS)}, got {dtype!r}")
    if quantity == "vjp" and dtype not in VJP_DTYPES:
        raise ValueError(
            f"--quantity vjp: every (x, g) pair is certified for {', '.join(VJP_DTYPES)} "
            f"(2^32 pairs); {dtype} has 2^64"
        )
    kernel_sha, reference_sha = kernel_digest(elementwise(module).name), reference_digest()
    todo = shards(dtype, limit, shard, quantity)
    folder = state or default_state()
    folder = folder / f"{module}.{quantity}.{dtype}.{kernel_sha[:12]}.{reference_sha[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    results, missing, computed = {}, [], []
    for start, stop in todo:
        path = folder / f"{start:010x}-{stop:010x}.json"
        if path.exists():
            results[start] = json.loads(path.read_text())
        else:
            missing.append((start, stop))
    workers = workers or os.cpu_count() or 1
    began = time.perf_counter()
    if missing:
        client, cluster = _cluster(scheduler, workers)
        try:
            workers = len(client.scheduler_info()["workers"]) or workers
            futures = [
                client.submit(check_shard, module, quantity, dtype, a, b, pure=False)
                for a, b in missing
            ]
            progress = Progress(f"liptable certify {module}.{quantity} {dtype}", len(futures))
            for future in as_completed(futures):
                done = future.result()
                path = folder / f"{done['start']:010x}-{done['stop']:010x}.json"
                path.write_text(json.dumps(done))
                results[done["start"]] = done
                computed.append(done)
                progress.step(f"{done['checked']:,} inputs")
            progress.close()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    wall = time.perf_counter() - began
    parts = [results[a] for a, _ in todo]
    listed = [item for part in parts for item in part["listed"]][:LISTED]
    return Certificate(
        module=module,
        quantity=quantity,
        dtype=dtype,
        kernel_sha256=kernel_sha,
        reference_sha256=reference_sha,
        shards=len(todo),
        inputs_checked=sum(p["checked"] for p in parts),
        complete=limit is None and shard is None,
        not_correctly_rounded=sum(p["not_correctly_rounded"] for p in parts),
        zero_sign_mismatches=sum(p["zero_sign_mismatches"] for p in parts),
        overflow_mismatches=sum(p["overflow_mismatches"] for p in parts),
        max_ulp=max((float(p["max_ulp"]) for p in parts), default=0.0),
        listed=listed,
        wall_seconds=wall,
        workers=workers,
        computed_inputs=sum(p["checked"] for p in computed),
        compute_seconds=sum(p["seconds"] for p in computed),
    )
