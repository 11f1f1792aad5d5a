"""liptable's Numba CPU kernels: fast, verified references for deep-learning modules.

Each module is a submodule with plain functions (``forward``, ``derivative``, ``vjp``,
``jacobian``), float16/float32/float64 in, same dtype out. Importing ``kernels`` does not
import SymPy; the loops compile on first use (and are cached on disk by Numba).

>>> from kernels import relu
>>> relu.forward([-1.0, 3.0])
array([0., 3.])
"""

from kernels import gelu as gelu
from kernels import relu as relu
from kernels import sigmoid as sigmoid
from kernels import swish as swish

__all__ = ["gelu", "relu", "sigmoid", "swish"]
