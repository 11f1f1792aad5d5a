"""liptable's Numba CPU kernels: fast, verified references for deep-learning modules.

Each module is a submodule with plain functions (``forward``, ``vjp``, ``jacobian``; the
elementwise ones also ``derivative``), float16/float32/float64 in, same dtype out.
bfloat16 (``ml_dtypes.bfloat16``), in every module: the elementwise modules have their own
loops, mixed (correctly rounded) and strict (``strict_fp16=True`` rounds every step to
bfloat16); the other kernels take it in mixed mode widened exactly to float64 and rounded
once (``kernels/_bf16.py``, ``widened``), and in strict mode run their strict loops with
every step rounded to bfloat16 (``kernels/_strict.py``); the composite blocks
(``residual``, ``weighted_residual``, ``compose``) run their stages in bfloat16 and round
their sums once. ``kernels.testing`` compares anyone's implementation with these kernels;
``kernels.torch`` (optional PyTorch) wraps them as autograd Functions.
Importing ``kernels`` does not import SymPy; the loops compile on first use (and are
cached on disk by Numba; ``kernels/_cache.py`` drops that cache when any kernel source
changed, since Numba does not see changes in the functions a kernel inlines).

>>> from kernels import relu
>>> relu.forward([-1.0, 3.0])
array([0., 3.])
"""

from kernels import _cache

_cache.invalidate_if_stale()

from kernels import avgpool as avgpool  # noqa: E402 - after the cache check
from kernels import batchnorm as batchnorm  # noqa: E402
from kernels import centernorm as centernorm  # noqa: E402
from kernels import compose as compose  # noqa: E402
from kernels import conv2d as conv2d  # noqa: E402
from kernels import dp_attention as dp_attention  # noqa: E402
from kernels import gelu as gelu  # noqa: E402
from kernels import l2_attention as l2_attention  # noqa: E402
from kernels import layernorm as layernorm  # noqa: E402
from kernels import linear as linear  # noqa: E402
from kernels import maxpool as maxpool  # noqa: E402
from kernels import relu as relu  # noqa: E402
from kernels import residual as residual  # noqa: E402
from kernels import rmsnorm as rmsnorm  # noqa: E402
from kernels import scs_attention as scs_attention  # noqa: E402
from kernels import sigmoid as sigmoid  # noqa: E402
from kernels import softmax as softmax  # noqa: E402
from kernels import swish as swish  # noqa: E402
from kernels import weighted_residual as weighted_residual  # noqa: E402
from kernels import weightnorm as weightnorm  # noqa: E402

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
