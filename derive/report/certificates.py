"""The "Certificates" section: the committed ``liptable certify`` results, each linked.

The certificates are read from the project's ``report/certificates/`` and written again
under the report's folder, so the links hold wherever ``--out`` points.
"""

from __future__ import annotations

import json
from pathlib import Path

from derive.definitions.activations import elementwise
from derive.digests import kernel_digest

FOLDER = Path(__file__).resolve().parents[2] / "report" / "certificates"


def certificate_section(folder: Path = FOLDER) -> tuple[list[str], dict[str, str]]:
    """The section's lines and the certificate files (relative name -> text)."""
    paths = sorted(folder.glob("*.json"))
    if not paths:
        return [], {}
    lines = [
        "## Certificates",
        "",
        "`liptable certify` checks an elementwise kernel against the correctly rounded "
        "references at every finite input of a format (or a slice spread over all binades), "
        "in shards on Dask distributed; a VJP's inputs are the pairs (x, g), checked against "
        "the correctly rounded g * f'(x). A zero of the wrong sign is counted apart from a wrong "
        "value: at x = -0 the references give f(0) = +0 exactly where the kernels give "
        "-0 * f'(0) = -0, and below 2^-1076 GeLU's derivative kernel loses the sign of its "
        "negative tail.",
        "",
        "The last column compares the certificate's digest of the kernel's sources (its "
        "module in `kernels/` and every file of `kernels/` it imports) with this report's.",
        "",
        "| kernel | format | inputs | not correctly rounded | zeros of the wrong sign "
        "| max ULP | per core | certificate | kernels |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    files = {}
    for path in paths:
        text = path.read_text()
        c = json.loads(text)
        files[f"certificates/{path.name}"] = text
        scope = "all" if c["complete"] else "slice"
        lines.append(
            f"| `{c['module']}.{c['quantity']}` | {c['dtype']} | {c['inputs_checked']:,} "
            f"({scope}) | {c['not_correctly_rounded']} | {c['zero_sign_mismatches']} "
            f"| {float(c['max_ulp_from_correctly_rounded']):g} "
            f"| {c['inputs_per_second_per_core']:,.0f}/s "
            f"| [{path.name}](certificates/{path.name}) "
            f"| {'these' if c['kernel_sha256'] == _current(c['module']) else 'older'} |"
        )
    return [*lines, ""], files


def _current(key: str) -> str:
    """The digest of the sources of the kernel that ``liptable certify KEY`` checks."""
    return kernel_digest(elementwise(key).name)
