"""``liptable envelope``: safe upstream-gradient sizes with proofs and witnesses.

>>> from derive.envelope import envelope
>>> float(envelope("layernorm", "float16", dim=4096, eps=1e-5).safe)
16.296875
"""

from derive.envelope.modules import Envelope, envelope, kernel_dx, models

__all__ = ["Envelope", "envelope", "kernel_dx", "models"]
