"""A least-squares line and a small SVG of RSS over time, for ``bench/memory_soak.py``.

Written by hand (about 60 lines of SVG) rather than with matplotlib, which the project's environment
does not carry and which would add ~40 MB to it for one figure.
"""

from __future__ import annotations

from collections.abc import Sequence

WIDTH, HEIGHT = 720, 320
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 30, 40


def fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points; a flat line through one."""
    n = len(xs)
    if n < 2:
        return 0.0, ys[0] if ys else 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def svg(samples: Sequence[Sequence[float]], seconds: float, per_hour: float) -> str:
    """RSS (MiB) against minutes, the fitted line over the last two thirds, gridlines every 100 MiB."""
    ts = [s[0] / 60 for s in samples]
    rss = [s[1] for s in samples]
    low = (min(rss) // 100) * 100
    high = (max(rss) // 100 + 1) * 100
    span_t = max(seconds / 60, ts[-1])

    def x(t: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * t / span_t

    def y(v: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * (v - low) / (high - low)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="18">Gateway RSS under mixed traffic (bench/memory_soak.py); '
        f"fit after the first third: {per_hour:+.1f} MiB/hour</text>",
    ]
    v = low
    while v <= high:
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
        )
        parts.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        v += 100
    step = 5 if span_t > 10 else 1
    for m in range(0, int(span_t) + 1, step):
        parts.append(f'<text x="{x(m):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{m}</text>')
    parts.append(f'<text x="{(LEFT + WIDTH) / 2}" y="{HEIGHT - 6}" text-anchor="middle">minutes</text>')
    parts.append(
        f'<text x="14" y="{TOP + 10}" transform="rotate(-90 14 {TOP + 10})" text-anchor="end">MiB</text>'
    )
    points = " ".join(f"{x(t):.1f},{y(r):.1f}" for t, r in zip(ts, rss, strict=True))
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    tail = [(t, r) for t, r in zip(ts, rss, strict=True) if t >= span_t / 3]
    if len(tail) >= 2:
        slope, cut = fit([t for t, _ in tail], [r for _, r in tail])
        t0, t1 = tail[0][0], tail[-1][0]
        parts.append(
            f'<line x1="{x(t0):.1f}" y1="{y(cut + slope * t0):.1f}" x2="{x(t1):.1f}" '
            f'y2="{y(cut + slope * t1):.1f}" stroke="#d62728" stroke-dasharray="6 4"/>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
