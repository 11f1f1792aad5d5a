"""The "PyTorch's accuracy" section: the committed ``liptable accuracy --against torch``
table (``report/accuracy/torch.json``), rendered and copied into the report's folder."""

from __future__ import annotations

import json
from pathlib import Path

FILE = Path(__file__).resolve().parents[2] / "report" / "accuracy" / "torch.json"
NAME = "accuracy/torch.json"


def _ulps(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.3g}"


def accuracy_section(path: Path = FILE) -> tuple[list[str], dict[str, str]]:
    """The section's lines and the table's file (relative name -> text); none without it."""
    if not path.exists():
        return [], {}
    text = path.read_text()
    table = json.loads(text)
    lines = [
        "## PyTorch's CPU implementations against the correctly rounded results",
        "",
        f"`liptable accuracy --against torch` (PyTorch {table['torch']}, seed {table['seed']}; "
        "`derive/accuracy.py`) runs PyTorch's own functions (`torch.sigmoid`, `F.gelu`, "
        "`F.layer_norm`, `F.rms_norm`, `F.batch_norm`, `F.scaled_dot_product_attention`, ...) "
        "on the inputs of `kernels.testing.hard_inputs` (every finite 16-bit value for the "
        "activations, the format's edges, constant, huge-mean and overflowing rows, masked "
        "and large logits) and on random ones (the activations' infinite and NaN inputs left "
        "out: there the two differ by convention, not accuracy), with autograd for the "
        "gradients, and measures "
        "each output with `kernels.testing` in ULPs of its format against the exact value "
        "(0.5 is the correctly rounded result's own error; inf marks a NaN or inf where the "
        "exact value is finite, or the reverse, counted in the NaN/inf column). "
        f"[{NAME}]({NAME}) has the worst element of each output in full.",
        "",
        "| module | format | output | max ULP | p99 ULP | NaN/inf | largest error at |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table["records"]:
        worst = r["worst"].split(";")[0] if r["worst"] else ""
        lines.append(
            f"| `{r['module']}` | {r['dtype']} | {r['output']} | {_ulps(r['max_ulp'])} "
            f"| {_ulps(r['p99_ulp'])} | {r['nonfinite_mismatches']} | {worst} |"
        )
    return [*lines, ""], {NAME: text}
