"""The evaluation's figure as SVG, with no plotting library: grouped bars of each method's recall@k and
all-gold@k with their bootstrap intervals as whiskers.

The legend sits right of the plot area, so it covers no bar; the y-axis reaches past the highest whisker
(rounded up to a tenth), so no interval is clipped at 1.0.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

__all__ = ["recall_svg", "PALETTE"]

#: one colour per method, in order (then again)
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
           "#64b5cd")
_BAR_W, _GAP, _LEFT, _TOP, _PLOT_H, _BOTTOM = 18, 22, 56, 44, 260, 40
_LEGEND_W = 190


def _metric_keys(res: dict) -> list[str]:
    first = next(iter(res["methods"].values()))["metrics"]
    return [k for k in first if k.startswith(("recall@", "all_gold@"))]


def recall_svg(res: dict) -> str:
    """SVG text of the figure of one ``results.json`` dict (methods x recall@k / all-gold@k, with intervals)."""
    methods = list(res["methods"])
    keys = _metric_keys(res)
    stats = {m: [res["methods"][m]["metrics"][k] for k in keys] for m in methods}
    top = max([1.0] + [float(s["high"]) for m in methods for s in stats[m]])
    y_max = math.ceil(top * 10 - 1e-9) / 10 + (0.05 if top >= 1.0 else 0.0)  # room above a whisker at 1.0
    group_w = len(methods) * _BAR_W + _GAP
    plot_w = max(len(keys), 1) * group_w
    width = _LEFT + plot_w + 20 + _LEGEND_W
    height = _TOP + _PLOT_H + _BOTTOM

    def y(v: float) -> float:
        return _TOP + _PLOT_H * (1.0 - min(max(v, 0.0), y_max) / y_max)

    lv = int(round(100 * res["config"]["level"]))
    title = f"{res['dataset']['name']}: {res['dataset']['n_questions']:,} questions ({lv}% bootstrap intervals)"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{_LEFT}" y="20" font-size="13">{escape(title)}</text>',
           f'<g class="plot" data-x="{_LEFT}" data-y="{_TOP}" data-width="{plot_w}" data-height="{_PLOT_H}" '
           f'data-ymax="{y_max:g}">']
    for t in range(int(round(y_max * 10)) + 1):
        v = t / 10
        if t % 2 == 0 or y_max <= 0.6:
            out.append(f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for gi, key in enumerate(keys):
        x0 = _LEFT + gi * group_w + _GAP / 2
        out.append(f'<text x="{x0 + len(methods) * _BAR_W / 2:.1f}" y="{_TOP + _PLOT_H + 16}" '
                   f'text-anchor="middle">{escape(key)}</text>')
        for mi, m in enumerate(methods):
            s = stats[m][gi]
            bx = x0 + mi * _BAR_W
            cx = bx + _BAR_W / 2
            mean, low, high = float(s["mean"]), float(s["low"]), float(s["high"])
            out.append(f'<rect class="bar" data-method="{escape(m)}" data-metric="{escape(key)}" x="{bx:.1f}" '
                       f'y="{y(mean):.1f}" width="{_BAR_W - 2}" height="{y(0) - y(mean):.1f}" '
                       f'fill="{PALETTE[mi % len(PALETTE)]}"/>')
            out.append(f'<path class="whisker" d="M{cx:.1f},{y(low):.1f} V{y(high):.1f} '
                       f'M{cx - 4:.1f},{y(low):.1f} h8 M{cx - 4:.1f},{y(high):.1f} h8" stroke="#222" fill="none"/>')
    out.append(f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{y(0):.1f}" stroke="#222"/>')
    out.append(f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#222"/>')
    out.append('</g>')
    lx = _LEFT + plot_w + 20
    out.append(f'<g class="legend" data-x="{lx}">')
    for mi, m in enumerate(methods):
        ly = _TOP + 14 * mi
        out.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{PALETTE[mi % len(PALETTE)]}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly + 9}">{escape(m)}</text>')
    out.append('</g></svg>')
    return "\n".join(out) + "\n"
