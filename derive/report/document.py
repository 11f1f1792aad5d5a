"""The derivation report: ``report/index.md`` for people, ``report/claims.json`` for programs.

Everything in it is computed here from the definitions, the claim checker and the proofs;
nothing is typed in. The output is deterministic: the same code writes the same bytes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from unittest.mock import patch

import sympy as sp

from derive.catalog import SECTIONS, section_entry
from derive.check import Result, check
from derive.claims import CLAIMS
from derive.codegen.activations import module_forms
from derive.definitions.activations import ELEMENTWISE, Elementwise
from derive.progress import Progress
from derive.report.accuracy import accuracy_section
from derive.report.attention import attention_section, jacobian_figure
from derive.report.batchnorm import batchnorm_section
from derive.report.certificates import certificate_section
from derive.report.descent import descent_section
from derive.report.envelope import envelope_section
from derive.report.figures import derivative_figure
from derive.report.float16 import Float16Facts, float16_facts
from derive.report.initialization import initialization_section
from derive.report.norms import norm_section
from derive.report.rows import row_section
from derive.report.theory import theory_section
from derive.report.updates import updates_section
from proofs.core import Verdict

#: Report sections, in the order of Table 2 (:data:`derive.catalog.SECTIONS`).
MODULE_ORDER = SECTIONS

CONVENTIONS = """\
## Conventions

- Layout: rows are samples or tokens, as in PyTorch. Elementwise modules act on every
  entry of `x` of any shape; LayerNorm, RMSNorm, CenterNorm, Softmax and the global
  poolings on the last axis of `x` of shape (..., D); WeightNorm and Linear map (..., D)
  to (..., O) (`x W^T + b`); Conv2d and the windowed poolings take NCHW images (PyTorch's
  cross-correlation; zero or circular padding; floor mode). The paper writes one sample as
  a column (`y = W x`): the same maps.
- Jacobians are in numerator layout, `J[i, j] = dy_i / dx_j`; the paper uses denominator
  layout (its Linear Jacobian is `W^T`), and the checker transposes before comparing. For
  elementwise modules both are `diag(f'(x))`.
- Lipschitz constants are in the 2-norm (the Frobenius norm of an image tensor): the
  supremum of the Jacobian's 2-norm over all inputs ("global"), or its value at one input
  ("local"). For an elementwise map the
  Jacobian is diagonal, so the constant is `sup_x |f'(x)|` (by the mean value theorem on
  each coordinate, and for ReLU by the case analysis in its proof).
- `eps` follows PyTorch: added to the variance (LayerNorm) or the mean of squares
  (RMSNorm). The paper adds its eps to a squared norm, so `eps_paper = D * eps`; printed
  formulas are checked with the paper's eps, and constants are given in both.
- Kinks: `relu'(0) = 0`; a tie of max pooling splits the gradient evenly (global) or
  gives it to the first maximum in row-major order (windowed), as PyTorch does.
  Non-finite inputs: NaN gives NaN; `+-inf` gives the limit; in softmax `-inf` is a mask
  (output and gradient 0), and a fully masked row gives 0.
- Arithmetic of the kernels: float32 inputs are evaluated in float64 and rounded once;
  float64 inputs in float64, or in double-double (~106 bits) where a formula's sums may
  cancel (the normalizations' row sums are always compensated for float64 input).
  float16: "mixed" mode widens
  half inputs, computes in float64 and rounds once (round to nearest even); "strict" mode
  rounds every intermediate to half precision, as pure half arithmetic would. Facts below
  are about the exact function rounded to half, unless they say "strict".
- Verdicts: `holds` (true as stated; bounds attained), `holds_loose` (valid, not tight),
  `fails` (false; counterexample given), `misprinted` (wrong as printed, intent holds),
  `approx` (a printed "≈" close enough: exact value and relative error given). One rule
  for every "≈": its error is the worst relative error |approximate - exact| / |exact|
  over every input and parameter the statement leaves free, in its own norm (absolute
  value; 2-norm for matrices), given with where it occurs; below 1/10 the verdict is
  `approx`, from 1/10 on `fails` with an exact witness. "rigorous" is true only
  for proofs (symbolic identities, ball-arithmetic enclosures, exact witnesses), never for
  sampling; a statement about every size that was machine-checked at some sizes only (no
  step for a symbolic size) says which ("yes, at D = 1..5 only"; `proven_for` in
  claims.json).
"""


def _modules(names: Iterable[str] | None) -> tuple[str, ...]:
    if names is None:
        return MODULE_ORDER
    unknown = sorted(set(names) - set(MODULE_ORDER))
    if unknown:
        raise ValueError(f"--modules: unknown {unknown}; known: {list(MODULE_ORDER)}")
    return tuple(m for m in MODULE_ORDER if m in names)


def _summary_row(r: Result) -> str:
    """The claim's row of the summary table."""
    value = r.value if len(r.value) <= 48 else r.value[:45] + "..."
    # A pipe ends a table cell in GitHub Markdown, also inside math: escape it.
    statement = r.claim.statement_latex.replace("|", "\\|")
    number = sp.sympify(r.value)
    numeric = isinstance(number, sp.Basic) and number.is_number
    decimal = f"{sp.N(number, 12)}" if numeric else ""
    return (
        f"| `{r.claim.id}` | ${statement}$ | **{r.verdict}** | "
        f"`{value}` | {decimal} | {_rigor(r)} |"
    )


def _rigor(r: Result) -> str:
    """The summary's "rigorous" cell: yes, yes at the sizes checked, or no (evidence)."""
    if not r.rigorous:
        return "no (evidence)"
    return "yes" if r.proven_for == "every size" else f"yes, at {r.proven_for} only"


def _rigor_text(r: Result) -> str:
    if not r.rigorous:
        return "evidence, not proof"
    if r.proven_for == "every size":
        return "rigorous"
    return f"rigorous at {r.proven_for}; not machine-checked for every size"


def _correction(r: Result) -> str | None:
    """The claim's entry in the corrections (None for a claim that holds)."""
    if r.verdict == Verdict.HOLDS:
        return None
    detail = " ".join(r.notes)
    return (
        f"- `{r.claim.id}` ({r.verdict}): printed ${r.claim.statement_latex}$; "
        f"liptable derives `{r.value}`. {detail}"
    ).rstrip()


def _summary(rendered: list[Rendered]) -> list[str]:
    lines = [
        "## Summary",
        "",
        "| claim | printed | verdict | liptable's value | decimal | rigorous |",
        "|---|---|---|---|---|---|",
    ]
    return [*lines, *(r.summary_row for r in rendered), ""]


def _corrections(rendered: list[Rendered]) -> list[str]:
    lines = ["## Corrections to Table 2", ""]
    others = [r.correction for r in rendered if r.correction is not None]
    if not others:
        return [*lines, "Every checked statement holds as printed.", ""]
    return [*lines, "Every statement whose verdict is not `holds`:", "", *others, ""]


def _claim_section(r: Result) -> list[str]:
    c = r.claim
    lines = [
        f"#### `{c.id}`: {r.verdict}",
        "",
        f"Source: {c.source}.",
        "",
        f"Printed: ${c.statement_latex}$",
        "",
        f"Derived: `{r.value}` ({_rigor_text(r)}; method: {r.method}).",
        "",
    ]
    if r.witness:
        pairs = ", ".join(f"{k} = `{v}`" for k, v in r.witness.items())
        lines += [f"Witness: {pairs}.", ""]
    notes = " ".join(n for n in (c.notes, *r.notes) if n)
    if notes:
        lines += [f"Notes: {notes}", ""]
    claim = r.proof.claim if "$" in r.proof.claim else f"${r.proof.claim}$"
    lines += [f"Proof of: {claim}", ""]
    for i, step in enumerate(r.proof.steps, 1):
        lines.append(f"{i}. *[{step.method}]* {step.statement}")
    return [*lines, ""]


def _float16_section(facts: Float16Facts) -> list[str]:
    return ["##### float16", "", *(f"- {fact}" for fact in facts.lines()), ""]


def _form_section(module: Elementwise, figure: str) -> list[str]:
    forward_form, derivative_form = module_forms(module)
    lines = [
        f"### {module.title}",
        "",
        f"Definition ({module.source}):",
        "",
        f"$$f(x) = {sp.latex(module.forward)}$$",
        "",
        "Derived by `sympy.diff`:",
        "",
        f"$$f'(x) = {sp.latex(module.derivative)}$$",
        "",
        f"At the kink: {module.kink}.",
        "",
        "The kernels evaluate these proven-equal forms (each branch minus the definition "
        "simplifies to 0):",
        "",
        f"$$f(x) = {sp.latex(forward_form.expr)}$$",
        "",
        f"({forward_form.why})",
        "",
        f"$$f'(x) = {sp.latex(derivative_form.expr)}$$",
        "",
        f"({derivative_form.why})",
        "",
        f"![f' of {module.key}]({figure})",
        "",
    ]
    return lines


def _family_section(family: str, name: str, files: dict[str, str]) -> list[str]:
    """The family's section text of ``name`` (figures it draws go into ``files``)."""
    if family == "norms":
        return norm_section(name)
    if family == "batchnorm":
        return batchnorm_section()
    if family == "rows":
        return row_section(name)
    if family == "theory":
        return theory_section(name)
    if family == "initialization":
        return initialization_section(name)
    if family == "descent":
        return descent_section(name)
    if family == "updates":
        return updates_section(name)
    if family == "attention":
        figure = None
        if name == "dp_attention":
            figure = "figures/attention_jacobian.svg"
            files[figure] = jacobian_figure()
        return attention_section(name, figure)
    lines: list[str] = []
    for module in (m for m in ELEMENTWISE if m.name == name):
        figure = f"figures/{module.key}.svg"
        files[figure] = derivative_figure(module)
        lines += _form_section(module, figure)
        lines += _float16_section(float16_facts(module.key))
    return lines


@dataclass(frozen=True)
class Rendered:
    """One claim's checked result as the report prints it (picklable: no proof steps to run)."""

    index: int  # position in derive.claims.CLAIMS
    module: str
    summary_row: str
    correction: str | None
    section: tuple[str, ...]
    record: dict


def _claim_task(index: int) -> Rendered:
    """Check ``CLAIMS[index]`` and render it."""
    r = check(CLAIMS[index])
    return Rendered(
        index,
        r.claim.module,
        _summary_row(r),
        _correction(r),
        tuple(_claim_section(r)),
        r.to_json(),
    )


def _section_task(name: str) -> tuple[list[str], dict[str, str]]:
    """The text of module ``name``'s section and the figures it draws."""
    files: dict[str, str] = {}
    return _family_section(section_entry(name).family, name, files), files


def _module_task(
    name: str, indices: tuple[int, ...]
) -> tuple[list[str], dict[str, str], list[Rendered]]:
    """Module ``name``'s section, its figures, and its claims ``CLAIMS[i]`` rendered.

    A module's section and claims are one task: they share work that a process computes
    once and keeps (the attentions' adversarial search, which the Lipschitz claim and the
    section's table both report; a family's SymPy derivations and references, which its
    claims reuse; SymPy's own cache), so one worker pays for it, not each. Measured on the
    full report with two workers and a warm Numba cache: 109 s of CPU and 58 s of wall time,
    against 131 s and 71 s with every claim a task of its own."""
    lines, files = _section_task(name)
    return lines, files, [_claim_task(i) for i in indices]


def _closing_task() -> tuple[list[str], dict[str, str]]:
    """The sections that span every module: FP16 envelopes, the certificates, then
    PyTorch's measured accuracy."""
    envelopes, figures = envelope_section()
    certificates, copies = certificate_section()
    accuracy, table = accuracy_section()
    return [*envelopes, *certificates, *accuracy], {**figures, **copies, **table}


#: The worker processes run single-threaded (``os.environ`` patched while they start, so
#: before they import NumPy and Numba; restored after): the workers already fill the
#: cores, and thread pools spinning beside another busy process cost more than they give
#: (measured: 162 s of CPU and 86 s of wall time for the report against 187 s and 99 s).
#: Kernels give the same bits at every thread count.
ONE_THREAD = {
    "NUMBA_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def _run(tasks: list[tuple[str, Callable[[], object]]], workers: int) -> dict[str, object]:
    """Run ``(label, task)`` pairs (a task: a picklable function of no arguments, such as a
    ``functools.partial`` of a module-level function); their results by label.

    With ``workers`` > 1 the tasks run in that many fresh processes (``spawn``: no state of
    this one is inherited), each task in one piece; the results are the same objects a
    serial run returns, so the report's bytes do not depend on the schedule.
    """
    progress = Progress("liptable report", len(tasks))
    results: dict[str, object] = {}
    if workers <= 1:
        for label, task in tasks:
            progress.step(label)
            results[label] = task()
        progress.close()
        return results
    context = multiprocessing.get_context("spawn")
    one_thread = patch.dict(os.environ, ONE_THREAD)
    with one_thread, ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending = {pool.submit(task): label for label, task in tasks}
        for future in as_completed(pending):
            label = pending[future]
            progress.step(label)
            results[label] = future.result()
    progress.close()
    return results


def default_workers() -> int:
    """Processes for the report: one per core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def build(modules: Iterable[str] | None = None, workers: int | None = None) -> dict[str, str]:
    """The report's files (relative name -> text) for the selected modules.

    Each module's section with its claims is a task (:func:`_module_task`), and so are the
    sections that span every module; ``workers`` processes run them (default: one per core;
    1 runs them here, in order).
    """
    names = _modules(modules)
    workers = default_workers() if workers is None else workers
    indices = [i for i, c in enumerate(CLAIMS) if c.module in names]
    tasks: list[tuple[str, Callable[[], object]]] = []
    if modules is None:  # the envelopes span every module: only in the full report
        tasks.append(("FP16 envelopes and certificates", _closing_task))
    claimed = {name: tuple(i for i in indices if CLAIMS[i].module == name) for name in names}
    tasks += [(f"module {name}", partial(_module_task, name, claimed[name])) for name in names]
    done = _run(tasks, workers)
    sections = {name: done[f"module {name}"][:2] for name in names}
    rendered = sorted(
        (r for name in names for r in done[f"module {name}"][2]), key=lambda r: r.index
    )
    files: dict[str, str] = {}
    lines = [
        "# liptable report",
        "",
        "Generated by `liptable report` from the SymPy definitions in `derive/definitions/` "
        "(one file per family: activations, norms, batchnorm, rows, attention). "
        "Do not edit: rerun the command.",
        "",
        "Source of the claims: Qi, Wang, Zhang, *Understanding Optimization of Deep Learning "
        "via Jacobian Matrix and Lipschitz Constant* (shared/seeds/001_76ce3a8a4b6079c3.txt), "
        "Table 2, and the course notes in shared/seeds/.",
        "",
        CONVENTIONS,
        *_summary(rendered),
        *_corrections(rendered),
        "## Modules",
        "",
    ]
    for name in names:
        section, figures = sections[name]
        files.update(figures)
        lines += [f"## {name}", "", *section, "### Claims", ""]
        for r in rendered:
            if r.module == name:
                lines += r.section
    if modules is None:
        section, extra = done["FP16 envelopes and certificates"]
        lines += section
        files.update(extra)
    files["index.md"] = "\n".join(lines).rstrip("\n") + "\n"
    records = [r.record for r in rendered]
    files["claims.json"] = json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    return files


def write(
    out: Path, modules: Iterable[str] | None = None, workers: int | None = None
) -> list[Path]:
    """Write the report under ``out``; returns the paths written."""
    written = []
    for name, text in sorted(build(modules, workers).items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
