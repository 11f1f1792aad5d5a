"""The derivation report: ``report/index.md`` for people, ``report/claims.json`` for programs.

Everything in it is computed from the definitions, the claim checker and the proofs;
nothing is typed in. The output is deterministic: the same code writes the same bytes.

This module schedules the work and writes the files; the work itself is in
:mod:`derive.report.tasks`, which the worker processes import. This one imports only the
catalog and the claims, so the workers start about 2.5 s sooner than if the process that
starts them first loaded the checkers, the proofs and the kernels.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from unittest.mock import patch

from derive.catalog import SECTIONS
from derive.claims import CLAIMS
from derive.progress import Progress

if TYPE_CHECKING:
    from derive.report.tasks import Rendered

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


def _task(name: str, *args: object) -> object:
    """``derive.report.tasks.<name>(*args)``, imported where the task runs (a worker, or
    this process when the report runs serially)."""
    from derive.report import tasks

    return getattr(tasks, name)(*args)


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

    Each module's section with its claims is a task (:func:`derive.report.tasks.module_task`),
    and so are the sections that span every module; ``workers`` processes run them (default:
    one per core; 1 runs them here, in order).
    """
    names = _modules(modules)
    workers = default_workers() if workers is None else workers
    tasks: list[tuple[str, Callable[[], object]]] = []
    if modules is None:  # the envelopes span every module: only in the full report
        tasks.append(("FP16 envelopes and certificates", partial(_task, "closing_task")))
    claimed = {name: tuple(i for i, c in enumerate(CLAIMS) if c.module == name) for name in names}
    tasks += [
        (f"module {name}", partial(_task, "module_task", name, claimed[name])) for name in names
    ]
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
