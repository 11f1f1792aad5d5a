"""liptable's Numba CPU kernels: fast, verified references for deep-learning modules.

Each module is a submodule with plain functions (``forward``, ``vjp``, ``jacobian``; the
elementwise ones also ``derivative``), float16/float32/float64 in, same dtype out.
Importing ``kernels`` does not import SymPy; the loops compile on first use (and are
cached on disk by Numba).

>>> from kernels import relu
>>> relu.forward([-1.0, 3.0])
array([0., 3.])
"""

from kernels import avgpool as avgpool
from kernels import batchnorm as batchnorm
from kernels import centernorm as centernorm
from kernels import compose as compose
from kernels import conv2d as conv2d
from kernels import dp_attention as dp_attention
from kernels import gelu as gelu
from kernels import l2_attention as l2_attention
from kernels import layernorm as layernorm
from kernels import linear as linear
from kernels import maxpool as maxpool
from kernels import relu as relu
from kernels import residual as residual
from kernels import rmsnorm as rmsnorm
from kernels import scs_attention as scs_attention
from kernels import sigmoid as sigmoid
from kernels import softmax as softmax
from kernels import swish as swish
from kernels import weighted_residual as weighted_residual
from kernels import weightnorm as weightnorm

__all__ = [
    "avgpool",
    "batchnorm",
    "centernorm",
    "compose",
    "conv2d",
    "dp_attention",
    "gelu",
    "l2_attention",
    "layernorm",
    "linear",
    "maxpool",
    "relu",
    "residual",
    "rmsnorm",
    "scs_attention",
    "sigmoid",
    "softmax",
    "swish",
    "weighted_residual",
    "weightnorm",
]
