"""Users of ``kernels`` do not pay for SymPy."""

from __future__ import annotations

import subprocess
import sys


def test_importing_and_running_kernels_does_not_import_sympy():
    code = (
        "import sys, numpy as np, kernels\n"
        "kernels.gelu.forward(np.zeros(2, np.float32), 'tanh')\n"
        "kernels.relu.vjp(np.zeros(2, np.float16), np.ones(2, np.float16))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sympy', 'derive', 'mpmath')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
