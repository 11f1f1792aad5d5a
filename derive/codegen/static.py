"""Static error bounds of the bounded forms: the records ``liptable prove-bounds`` writes.

A bounded form ``{q}_fe`` (``derive.codegen.emit.bounded_function``) returns a value ``v``
and a running bound ``e`` on its error. Where ``e <= RELATIVE |v| + ABSOLUTE`` holds for
every float32 input ``x`` with ``|x| <= LIMIT`` (``proofs/static_bounds.py`` checks it on
every finite float32, which covers float16 and bfloat16 too), the fast loops may decide
with that cheaper bound instead: LLVM then drops the running bound's arithmetic. A record
holds the three constants and the digest of what they were proven for (the ``_fe``
function's text and the files of ``kernels/`` it runs); the generator uses a record only
while its digest matches the code it emits, so a changed form falls back to its running
bound until the enumeration is rerun.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from derive.digests import files_digest, import_closure

RECORDS = Path(__file__).resolve().parent / "static_bounds.json"

#: The absolute part of every static bound: 2^-51 of float32's smallest subnormal spacing
#: (float16's and bfloat16's are larger), so it decides as well as 0 would, and far above
#: the running bounds' subnormal terms and the far tails' tiny values, whose relative
#: error may grow (a GeLU's exp(-x^2/2) argument carries an error that grows with x^2).
ABSOLUTE = 2.0**-200

#: The largest relative bound the fast loops decide with: the static domain ends before the
#: first binade of |x| that needs more. With 2^-42 a float32 result is undecided for about
#: one element in 2^17, so about one block of 1,024 in 128 takes the scalar path.
RELATIVE_TARGET = 2.0**-42

#: A static domain smaller than |x| <= MIN_LIMIT is not used (the form cancels near 0).
MIN_LIMIT = 16.0


@dataclass(frozen=True)
class StaticBound:
    """``e <= relative |v| + absolute`` (as float64 arithmetic computes it) for every finite
    float32 ``x`` with ``|x| <= limit``, proven by enumeration over ``inputs`` inputs."""

    module: str
    quantity: str
    relative: float
    absolute: float
    limit: float
    largest_ratio: float
    inputs: int
    outside: int
    seconds: float
    digest: str


def form_digest(fe_text: str) -> str:
    """The digest a record is proven for: the ``_fe`` function's source and the files of
    ``kernels/`` that ``kernels/_vmath.py`` runs."""
    return files_digest(import_closure("kernels/_vmath.py"), prefix=fe_text)


def load() -> list[StaticBound]:
    """The committed records (none before the first ``liptable prove-bounds``)."""
    if not RECORDS.exists():
        return []
    return [StaticBound(**record) for record in json.loads(RECORDS.read_text())]


def save(records: list[StaticBound]) -> None:
    """Write ``records``, sorted by module and quantity."""
    ordered = sorted(records, key=lambda r: (r.module, r.quantity))
    RECORDS.write_text(json.dumps([asdict(r) for r in ordered], indent=1) + "\n")


def usable(record: StaticBound) -> bool:
    """Whether the fast loops decide with ``record``: tight enough, on a domain that holds
    more than the few values around 0."""
    return record.relative <= RELATIVE_TARGET and record.limit >= MIN_LIMIT


def current(module: str, quantity: str, fe_text: str) -> StaticBound | None:
    """The record of ``module``'s ``quantity`` if it was proven for ``fe_text`` as it is now
    and is tight enough to use."""
    digest = form_digest(fe_text)
    for record in load():
        if (record.module, record.quantity, record.digest) == (module, quantity, digest):
            return record if usable(record) else None
    return None
