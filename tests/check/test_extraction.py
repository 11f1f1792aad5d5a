"""One reading of the extracted text: the absolute-value bars Table 2 lost, restored alike."""

from __future__ import annotations

import re
from pathlib import Path

from derive.claims import CLAIMS, LOST_BARS, TABLE2

SEED = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "001_76ce3a8a4b6079c3.txt"
#: ``\max_D`` then a symbol standing between spaces: where a pair of bars was lost.
_LOST = re.compile(r"\\max_D\s*(\\frac\{|\()?\s\\(gamma|nu)_D\s")
_NOTE = LOST_BARS.split("`")[0]


def _lipschitz_cells() -> dict[str, str]:
    """Table 2's rows: the row's name (its bold text) -> its last cell, the Lipschitz one."""
    cells = {}
    for line in SEED.read_text().splitlines():
        match = re.match(r"<b>(.+?)</b>", line)
        if match and "$" in line:
            cells[match.group(1)] = line.rsplit("\t", 1)[-1]
    return cells


def test_every_cell_that_lost_its_bars_is_read_with_them_and_says_so():
    """Each Table 2 Lipschitz cell with a bare ``\\max_D  \\gamma_D`` (or ``\\nu_D``) has
    its claim read with the bars and carry the one note; no other claim carries it."""
    cells = _lipschitz_cells()
    lost = sorted(row for row, cell in cells.items() if _LOST.search(cell))
    assert lost == ["BatchNorm", "CenterNorm", "LayerNorm", "RMSNorm", "Weighted Residual Block"]
    for row in lost:
        (claim,) = (
            c for c in CLAIMS if c.kind == "lipschitz" and c.source.startswith(TABLE2.format(row))
        )
        assert re.search(r"\|\\(gamma|nu)_D\|", claim.statement_latex), claim.id
        assert claim.notes.startswith(_NOTE), claim.id
    noted = sorted(c.key for c in CLAIMS if _NOTE in c.notes)
    assert len(noted) == len(lost), noted
