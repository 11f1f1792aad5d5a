"""liptable accuracy: PyTorch's implementations measured with kernels.testing; the report
renders the committed table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from derive import accuracy
from derive.cli import main
from derive.report.accuracy import FILE, accuracy_section


def test_the_inputs_are_finite_and_of_the_format():
    for module in ("gelu", "layernorm", "batchnorm", "dp_attention"):
        for name in accuracy.DTYPES:
            arrays = accuracy.inputs(module, accuracy.numpy_dtype(name), np.random.default_rng(0))
            assert all(a.dtype == accuracy.numpy_dtype(name) for a in arrays), (module, name)
            if module == "gelu":
                assert np.isfinite(arrays[0].astype(np.float32)).all()


def test_the_committed_table_is_rendered():
    table = json.loads(FILE.read_text())
    lines, files = accuracy_section()
    assert files == {"accuracy/torch.json": FILE.read_text()}
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == len(table["records"])
    assert {r["dtype"] for r in table["records"]} == set(accuracy.DTYPES)


def test_relu_in_pytorch_is_exact_and_the_command_writes_the_table(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "torch.json"
    assert main(["accuracy", "--modules", "relu", "--out", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert {(r["dtype"], r["output"]) for r in records} == {
        (d, o) for d in accuracy.DTYPES for o in ("forward", "dx")
    }
    assert all(r["max_ulp"] == 0 and r["nonfinite_mismatches"] == 0 for r in records)
    assert "6 outputs measured" in capsys.readouterr().out


def test_a_known_pytorch_defect_shows_in_the_table():
    """F.gelu (erf form) overflows at the largest float32, where GeLU(x) = x."""
    table = json.loads(FILE.read_text())
    (gelu,) = (
        r
        for r in table["records"]
        if (r["module"], r["dtype"], r["output"]) == ("gelu", "float32", "forward")
    )
    assert gelu["max_ulp"] == "inf" and gelu["nonfinite_mismatches"] >= 1
    assert not math.isnan(float(gelu["p99_ulp"]))
