"""The report's SVG figures, drawn with matplotlib.

Deterministic output: the Agg backend, an ``svg.hashsalt`` fixed for every figure (the ids
of clip paths and glyphs), text as paths from the fonts matplotlib ships, and no ``Date``
metadata; the matplotlib version is pinned in ``pyproject.toml`` so that CI draws the same
bytes as the committed report.
"""

from __future__ import annotations

import io
import math

import matplotlib
import mpmath
import sympy as sp
from matplotlib.figure import Figure

from derive.definitions.activations import Elementwise, x

matplotlib.use("Agg")

X_RANGE = (-8.0, 8.0)
SAMPLES = 321
SIZE = (6.4, 3.4)  # inches

#: Colours and dash styles of the series of :func:`loglog_figure`: each series has its own
#: colour (up to ten), and the dash styles cycle, so that curves lying on top of each other
#: stay visible.
SERIES_COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
)
SERIES_STYLES = ("-", "--", "-.", ":")

_RC = {"svg.hashsalt": "liptable", "svg.fonttype": "path", "font.size": 9}


def _svg(figure: Figure) -> str:
    out = io.StringIO()
    with matplotlib.rc_context(_RC):
        figure.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")
    return out.getvalue()


def _figure() -> tuple[Figure, object]:
    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=SIZE)
        return figure, figure.add_subplot()


def derivative_figure(module: Elementwise) -> str:
    """f and f' of ``module`` on [-8, 8] (mpmath at 30 digits), both whole, with labelled
    axes and a legend outside the plotting area."""
    f = sp.lambdify(x, module.forward, "mpmath")
    df = sp.lambdify(x, module.derivative, "mpmath")
    xs = [X_RANGE[0] + (X_RANGE[1] - X_RANGE[0]) * k / (SAMPLES - 1) for k in range(SAMPLES)]
    with mpmath.workdps(30):
        fs = [float(f(mpmath.mpf(v))) for v in xs]
        dfs = [float(df(mpmath.mpf(v))) for v in xs]
    with matplotlib.rc_context(_RC):
        figure, axes = _figure()
        axes.axhline(0.0, color="#bbbbbb", linewidth=0.8)
        axes.axhline(1.0, color="#bbbbbb", linewidth=0.8, linestyle="--")
        axes.plot(xs, fs, color="#555555", linewidth=1.6, label="f(x)")
        axes.plot(xs, dfs, color="#1f77b4", linewidth=1.6, label="f'(x)")
        axes.set_xlim(*X_RANGE)
        axes.set_xlabel("x")
        axes.set_ylabel("value")
        axes.set_title(module.title)
        axes.grid(True, color="#eeeeee")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _svg(figure)


def loglog_figure(
    title: str, series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str
) -> str:
    """Curves (x, y) with x, y > 0 on log-log axes, each series its own colour and dash
    style, the legend outside the plotting area."""
    with matplotlib.rc_context(_RC):
        figure, axes = _figure()
        for k, (name, curve) in enumerate(series.items()):
            kept = [(a, b) for a, b in curve if a > 0 and b > 0 and math.isfinite(a * b)]
            axes.plot(
                [a for a, _ in kept],
                [b for _, b in kept],
                color=SERIES_COLOURS[k % len(SERIES_COLOURS)],
                linestyle=SERIES_STYLES[k % len(SERIES_STYLES)],
                linewidth=1.5,
                label=name,
            )
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_title(title)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(True, which="major", color="#eeeeee")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _svg(figure)
