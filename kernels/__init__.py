"""liptable's Numba CPU kernels: fast, verified references for deep-learning modules.

Each module is a submodule with plain functions (``forward``, ``vjp``, ``jacobian``; the
elementwise ones also ``derivative``), float16/float32/float64 in, same dtype out.
Importing ``kernels`` does not import SymPy; the loops compile on first use (and are
cached on disk by Numba).

>>> from kernels import relu
>>> relu.forward([-1.0, 3.0])
array([0., 3.])
"""

from kernels import batchnorm as batchnorm
from kernels import centernorm as centernorm
from kernels import gelu as gelu
from kernels import layernorm as layernorm
from kernels import relu as relu
from kernels import rmsnorm as rmsnorm
from kernels import sigmoid as sigmoid
from kernels import swish as swish
from kernels import weightnorm as weightnorm

__all__ = [
    "batchnorm",
    "centernorm",
    "gelu",
    "layernorm",
    "relu",
    "rmsnorm",
    "sigmoid",
    "swish",
    "weightnorm",
]
