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


def test_the_harness_imports_neither_sympy_nor_torch_nor_hypothesis():
    """kernels.testing (and its pytest plugin) compares with liptable's kernels alone:
    importing it and checking a NumPy implementation loads no SymPy, derive, mpmath,
    PyTorch or hypothesis."""
    code = (
        "import sys, numpy as np\n"
        "import kernels.testing as t, kernels.pytest_plugin\n"
        "x = np.linspace(-3, 3, 9)\n"
        "t.assert_matches_reference(lambda v: 1 / (1 + np.exp(-v)), 'sigmoid', x, grad=False)\n"
        "heavy = ('sympy', 'derive', 'mpmath', 'torch', 'hypothesis')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
