"""512-bit vectors for the kernels on processors with AVX-512.

On Intel's AVX-512 processors LLVM vectorizes for 256-bit registers all the same: its
tuning flag ``prefer-256-bit`` is set for them, because 512-bit instructions lower the clock
of the early ones. The kernels' loops are dominated by
float64 arithmetic (the bounded exponentials and polynomials of ``kernels/_vmath.py``, the
row sums of the norms and Softmax), which runs up to twice as many lanes per
instruction in 512-bit registers: on this project's Cascade Lake machine, forward + VJP of
float32 Sigmoid at (4096, 1024) took 15.4-17.3 ms against 22.6-23.0 with 256-bit vectors,
Softmax 22.5-24.8 against 33.6, GeLU (exact) 118-129 against 191-195 (two ``liptable bench``
runs each way, taking turns; ``kernels/SPEED.md``, "Vector width").

:func:`prefer_wide_vectors` therefore gives Numba, before it builds its code generator, the
host's own features (Numba's default) with ``-prefer-256-bit`` added. It runs when
``kernels`` is imported (``kernels/_cache.py``, which ``kernels/__init__.py`` imports first)
and does nothing if

* the processor has no AVX-512 (``avx512f``);
* ``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES`` is set: the user's choice stands (setting
  ``NUMBA_CPU_FEATURES`` to the host's features, printed by
  ``python -c "from numba.core.codegen import get_host_cpu_features as f; print(f())"``,
  keeps LLVM's 256-bit default);
* Numba has already built its CPU target in this process (another library's Numba code
  came first): the kernels then get Numba's default code.

The choice is Numba's, per process: other Numba functions compiled in the same process get
512-bit vectors too. Numba's cache keys a compiled function by the target's features, so
code for the two widths is cached side by side.

What the width changes. Every operation outside the ``fastmath`` loops (the reassociated or
contracted sums) is rounded per lane as IEEE 754 prescribes, whatever the vector holds: the
activations, Softmax and the poolings give the same bits at either width, and so does every
kernel a certificate covers (``tests/kernels/test_target.py`` compares the two widths in
separate processes). The reassociated sums (the norms' float32 and float16 row sums, the
attentions') are added in an order the vectorizer picks, which depends on the width: their
float64 results differ in the last bits (91 of 240 sums of wide-range float32 rows,
measured), and a rounded output may then, rarely, differ too. Their error bounds hold for
any order, and within one process the results do not depend on the thread count.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["NARROW", "prefer_wide_vectors", "wide_vectors_apply"]

#: LLVM's tuning flag that keeps the vectorizer at 256 bits on AVX-512 processors.
NARROW = "prefer-256-bit"


def wide_vectors_apply(features: str, environ: Mapping[str, str]) -> bool:
    """Whether :func:`prefer_wide_vectors` changes anything for a host with the LLVM feature
    string ``features`` and the environment ``environ``.

    >>> wide_vectors_apply("+avx2,+avx512f,+fma", {})
    True
    >>> wide_vectors_apply("+avx2,-avx512f,+fma", {})
    False
    >>> wide_vectors_apply("+avx2,+avx512f", {"NUMBA_CPU_FEATURES": "+avx2"})
    False
    """
    if "NUMBA_CPU_NAME" in environ or "NUMBA_CPU_FEATURES" in environ:
        return False
    return "+avx512f" in features.split(",")


def prefer_wide_vectors() -> bool:
    """Ask Numba for 512-bit vectors where that applies (see the module docstring); returns
    whether it did."""
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    from numba.core.registry import cpu_target

    if "_toplevel_target_context" in vars(cpu_target):  # the code generator exists
        return False
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return False
    features = get_host_cpu_features()
    if not wide_vectors_apply(features, os.environ):
        return False
    config.CPU_FEATURES = f"{features},-{NARROW}"
    return True
