"""The report: deterministic, complete for every module, consistent with the checker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
import sympy as sp

from derive.check.core import APPROX_LIMIT
from derive.claims import CLAIMS
from derive.cli import main
from derive.report import document as report
from derive.report.float16 import ALL_HALVES, intervals


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    """The full report, its tasks run in two worker processes (whatever the core count)."""
    return report.build(workers=2)


#: Modules rebuilt serially for the determinism check: a figure, the row statistics' symbolic
#: proofs, a matrix claim and a Table 2 row with an equation of the notes, at a fraction of
#: a full build's cost (the full report is compared with the committed one below, which an
#: earlier process built).
SERIAL_MODULES = ("relu", "layernorm", "softmax")


def _sections(index: str) -> dict[str, str]:
    """index.md's top-level sections (``## ...``) by heading."""
    parts = index.split("\n## ")
    return {part.split("\n", 1)[0]: part for part in parts[1:]}


def test_output_is_deterministic(files):
    """The same modules rebuilt with every task run in order in this process give the same
    bytes as the two-process full build: each claim record, each figure and each module's
    section. The output depends neither on the schedule nor on the process (its hash seed,
    its caches)."""
    again = report.build(SERIAL_MODULES, workers=1)
    full = {r["id"]: r for r in json.loads(files["claims.json"])}
    records = json.loads(again["claims.json"])
    assert {r["module"] for r in records} == set(SERIAL_MODULES)
    for record in records:
        assert record == full[record["id"]], f"{record['id']} differs between two builds"
    for name in again.keys() - {"claims.json", "index.md"}:
        assert again[name] == files[name], f"{name} differs between two builds"
    sections, full_sections = _sections(again["index.md"]), _sections(files["index.md"])
    for module in SERIAL_MODULES:
        assert sections[module] == full_sections[module], f"section {module} differs"


def test_committed_report_is_current(files):
    """report/ in the repository is what `liptable report` writes now."""
    root = Path(__file__).resolve().parents[2] / "report"
    committed = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    assert committed.keys() == files.keys(), sorted(committed.keys() ^ files.keys())
    for name, text in files.items():
        assert committed[name] == text, f"report/{name} is stale: run `liptable report`"


def test_claims_json_lists_every_claim_in_order(files):
    records = json.loads(files["claims.json"])
    assert [r["id"] for r in records] == [c.id for c in CLAIMS]
    assert all(r["verdict"] for r in records)


#: The fields SPEC requires of every record of claims.json, and the verdicts it knows.
REQUIRED = {
    "id",
    "module",
    "kind",
    "source",
    "statement_latex",
    "verdict",
    "printed_value",
    "value",
    "method",
    "rigorous",
    "witness",
    "notes",
}
VERDICTS = {"holds", "holds_loose", "fails", "misprinted", "approx"}


def test_json_records_have_the_spec_fields(files):
    """Every record: SPEC's fields, a known verdict, a value a program can parse, and a
    decimal value to at least 30 digits where it is a float."""
    for record in json.loads(files["claims.json"]):
        missing = REQUIRED - set(record)
        assert not missing, f"{record['id']}: missing {missing}"
        assert record["verdict"] in VERDICTS, record
        value = record["value"]
        parsed = sp.sympify(value)
        if isinstance(parsed, sp.Float):
            digits = len(value.replace("-", "").replace(".", "").lstrip("0"))
            assert digits >= 30, f"{record['id']}: value {value} has {digits} digits"


def test_rigorous_means_no_sampling_step(files):
    for record in json.loads(files["claims.json"]):
        sampled = any(step["method"] == "sampling (evidence)" for step in record["proof"])
        assert record["rigorous"] == (not sampled), (record["id"], record["rigorous"], sampled)


def test_one_rule_for_every_approximation(files):
    """Every claim printed with '≈' (CLAIMS' approximate flag) reports its worst relative
    error, and its verdict follows from it alone: approx below 1/10, fails from 1/10 on (with
    a witness). The audit found GeLU's reported at +x only, BatchNorm's as 0 in its local
    reading, and a 100% error labelled approx."""
    approximate = {c.id for c in CLAIMS if c.approximate}
    assert approximate, "no approximate claim"
    for record in json.loads(files["claims.json"]):
        if record["id"] not in approximate:
            assert record["verdict"] != "approx", record["id"]
            continue
        worst = float(record["relative_error"])
        expected = "approx" if worst < float(APPROX_LIMIT) else "fails"
        assert record["verdict"] == expected, (record["id"], worst, record["verdict"])
        if expected == "fails":
            assert record["witness"] and "relative_error" in record["witness"], record["id"]
            assert float(sp.N(sp.sympify(record["witness"]["relative_error"]))) >= 0.1


def test_sizes_checked_are_stated_beside_rigorous(files):
    """No claim says "rigorous" for more than was machine-checked: a statement about every
    size checked at some sizes only carries them in proven_for and in the summary's cell;
    the BatchNorm chain rule, once checked at M = 1..4 only, now covers every M."""
    records = {r["id"]: r for r in json.loads(files["claims.json"])}
    summary = files["index.md"].split("## Summary", 1)[1].split("\n## ", 1)[0]
    for record in records.values():
        assert record["proven_for"], record["id"]
        row = next(line for line in summary.splitlines() if f"`{record['id']}`" in line)
        cell = row.rstrip(" |").rsplit("|", 1)[1].strip()
        if not record["rigorous"]:
            assert cell == "no (evidence)", (record["id"], cell)
        elif record["proven_for"] == "every size":
            assert cell == "yes", (record["id"], cell)
        else:
            assert cell == f"yes, at {record['proven_for']} only", (record["id"], cell)
    for label in ("eq16", "eq17", "jacobian", "B48", "B49", "B53", "KE21"):
        assert records[f"batchnorm.{label}"]["proven_for"] == "every size", label


def test_index_has_every_section(files):
    index = files["index.md"]
    for heading in ("## Conventions", "## Summary", "## Corrections to Table 2"):
        assert heading in index, heading
    for name in report.MODULE_ORDER:
        assert f"\n## {name}\n" in index, name
    for record in json.loads(files["claims.json"]):
        assert f"`{record['id']}`: {record['verdict']}" in index, record["id"]


def test_corrections_list_every_verdict_but_holds(files):
    index = files["index.md"]
    corrections = index.split("## Corrections to Table 2", 1)[1].split("\n## ", 1)[0]
    for record in json.loads(files["claims.json"]):
        listed = f"`{record['id']}` ({record['verdict']})" in corrections
        assert listed == (record["verdict"] != "holds"), record["id"]


def test_figures_are_referenced_and_svg(files):
    """Every figure is linked, parses as SVG, carries no date, and has labelled axes."""
    figures = [name for name in files if name.startswith("figures/")]
    assert figures
    for name in figures:
        root = ElementTree.fromstring(files[name].encode())
        assert root.tag == "{http://www.w3.org/2000/svg}svg", name
        assert "<dc:date>" not in files[name], name
        assert files[name].count('id="xtick_') >= 3, f"{name}: x-axis ticks"
        assert files[name].count('id="legend_') == 1, f"{name}: one legend"
        assert f"]({name})" in files["index.md"], name


def test_module_selection():
    selected = report.build(["relu"])
    records = json.loads(selected["claims.json"])
    assert {r["module"] for r in records} == {"relu"}
    with pytest.raises(ValueError, match="unknown"):
        report.build(["softmaxx"])


def test_cli_writes_the_selected_modules(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path), "--modules", "relu"]) == 0
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {"index.md", "claims.json", "figures/relu.svg"}, written
    assert str(tmp_path / "index.md") in capsys.readouterr().out


def test_float16_intervals_are_maximal_runs_in_value_order():
    values = ALL_HALVES.astype(np.float64)
    with np.errstate(invalid="ignore"):
        runs = intervals((np.abs(values) > 1) & (np.abs(values) < 3))
    assert runs == [(-2.998046875, -1.0009765625), (1.0009765625, 2.998046875)], runs
    assert intervals(values == 0) == []


def test_worker_processes_run_single_threaded(monkeypatch):
    """The report's workers start with one thread per pool; this process's environment is
    left as it was."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    tasks = [(name, partial(os.getenv, name)) for name in report.ONE_THREAD]
    assert report._run(tasks, workers=2) == dict.fromkeys(report.ONE_THREAD, "1")
    assert os.environ["NUMBA_NUM_THREADS"] == "2" and "OPENBLAS_NUM_THREADS" not in os.environ


def test_the_scheduling_process_loads_none_of_the_work():
    """Importing the report's scheduler loads no kernel, no Numba, no matplotlib and none of
    the checkers or the tasks: those are the workers' to import (a fresh interpreter, since
    this one has them all)."""
    code = (
        "import sys, derive.report.document; "
        "print(' '.join(m for m in ('numba', 'kernels', 'matplotlib', 'derive.check', "
        "'derive.report.tasks', 'derive.reference.core') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []
