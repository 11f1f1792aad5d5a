"""Small SVG figures for the report, written by hand so the report needs no plotting
library and stays byte-for-byte deterministic."""

from __future__ import annotations

import mpmath
import sympy as sp

from derive.definitions.activations import Elementwise, x

WIDTH, HEIGHT, MARGIN = 480, 240, 36
X_RANGE = (-8.0, 8.0)
SAMPLES = 321


def _polyline(points: list[tuple[float, float]], colour: str) -> str:
    path = " ".join(f"{px:.2f},{py:.2f}" for px, py in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>'


def derivative_figure(module: Elementwise) -> str:
    """f (grey) and f' (blue) of ``module`` on [-8, 8], with the lines y = 0 and y = 1."""
    f = sp.lambdify(x, module.forward, "mpmath")
    df = sp.lambdify(x, module.derivative, "mpmath")
    xs = [X_RANGE[0] + (X_RANGE[1] - X_RANGE[0]) * k / (SAMPLES - 1) for k in range(SAMPLES)]
    with mpmath.workdps(30):
        fs = [float(f(mpmath.mpf(v))) for v in xs]
        dfs = [float(df(mpmath.mpf(v))) for v in xs]
    y_lo, y_hi = -1.5, 2.0

    def to_px(xv: float, yv: float) -> tuple[float, float]:
        yv = min(max(yv, y_lo), y_hi)
        px = MARGIN + (xv - X_RANGE[0]) / (X_RANGE[1] - X_RANGE[0]) * (WIDTH - 2 * MARGIN)
        py = HEIGHT - MARGIN - (yv - y_lo) / (y_hi - y_lo) * (HEIGHT - 2 * MARGIN)
        return px, py

    def hline(yv: float) -> str:
        (x0, y0), (x1, _) = to_px(X_RANGE[0], yv), to_px(X_RANGE[1], yv)
        return (
            f'<line x1="{x0:.2f}" y1="{y0:.2f}" x2="{x1:.2f}" y2="{y0:.2f}" '
            'stroke="#bbb" stroke-dasharray="3,3"/>'
            f'<text x="{x0 - 4:.2f}" y="{y0 + 4:.2f}" font-size="10" text-anchor="end">'
            f"{yv:g}</text>"
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
        hline(0.0),
        hline(1.0),
        _polyline([to_px(a, b) for a, b in zip(xs, fs, strict=True)], "#999"),
        _polyline([to_px(a, b) for a, b in zip(xs, dfs, strict=True)], "#1f5fbf"),
        f'<text x="{MARGIN}" y="16" font-size="12">{module.title}: f (grey), '
        "f' (blue), x in [-8, 8]</text>",
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


#: Colours of the series of :func:`loglog_figure`, in order.
SERIES_COLOURS = ("#c0392b", "#1f5fbf", "#27ae60", "#8e44ad")


def loglog_figure(title: str, series: dict[str, list[tuple[float, float]]]) -> str:
    """Curves (x, y) with x, y > 0 on log-log axes, one colour per series, with a legend
    and a tick at every power of ten."""
    import math

    points = [(a, b) for curve in series.values() for a, b in curve if a > 0 and b > 0]
    lx = [math.log10(a) for a, _ in points]
    ly = [math.log10(b) for _, b in points]
    x_lo, x_hi = math.floor(min(lx)), math.ceil(max(lx))
    y_lo, y_hi = math.floor(min(ly)), math.ceil(max(ly))

    def to_px(xv: float, yv: float) -> tuple[float, float]:
        px = MARGIN + (math.log10(xv) - x_lo) / (x_hi - x_lo) * (WIDTH - 2 * MARGIN)
        py = HEIGHT - MARGIN - (math.log10(yv) - y_lo) / (y_hi - y_lo) * (HEIGHT - 2 * MARGIN)
        return px, py

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for e in range(y_lo, y_hi + 1):
        x0, y0 = to_px(10.0**x_lo, 10.0**e)
        x1, _ = to_px(10.0**x_hi, 10.0**e)
        parts.append(
            f'<line x1="{x0:.2f}" y1="{y0:.2f}" x2="{x1:.2f}" y2="{y0:.2f}" stroke="#ddd"/>'
            f'<text x="{x0 - 4:.2f}" y="{y0 + 4:.2f}" font-size="10" text-anchor="end">'
            f"1e{e}</text>"
        )
    for e in range(x_lo, x_hi + 1):
        x0, y0 = to_px(10.0**e, 10.0**y_lo)
        parts.append(
            f'<text x="{x0:.2f}" y="{y0 + 14:.2f}" font-size="10" text-anchor="middle">1e{e}</text>'
        )
    for k, (name, curve) in enumerate(series.items()):
        colour = SERIES_COLOURS[k % len(SERIES_COLOURS)]
        kept = [to_px(a, b) for a, b in curve if a > 0 and b > 0]
        parts.append(_polyline(kept, colour))
        parts.append(
            f'<text x="{WIDTH - MARGIN:.2f}" y="{MARGIN + 14 * k:.2f}" font-size="11" '
            f'text-anchor="end" fill="{colour}">{name}</text>'
        )
    parts += [f'<text x="{MARGIN}" y="16" font-size="12">{title}</text>', "</svg>"]
    return "\n".join(parts) + "\n"
