"""Standalone SVG line plots for the benchmark scripts, drawn the way the CLI's cli/svg.c draws
them (log or linear axes, a legend, dashed reference series, gaps at missing points), so the
plots of `handgrad bench --plot` and `bench/compare_torch --plot` look alike.
No dependencies beyond the standard library."""
import math
import os

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
ML, MR, MT, MB = 78, 16, 34, 48


def _usable(v, log):
    return v is not None and math.isfinite(v) and (not log or v > 0)


def _esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Axis:
    def __init__(self, values, log, p0, p1, is_x):
        vals = [v for v in values if _usable(v, log)]
        lo, hi = (min(vals), max(vals)) if vals else ((1, 10) if log else (0, 1))
        if log:
            if hi / lo < 1.5:
                lo, hi = lo / 1.25, hi * 1.25
        else:
            if not is_x and 0 < lo < 0.25 * hi:
                lo = 0
            pad = 0.04 * (hi - lo) if hi > lo else max(abs(hi) * 0.1, 1.0)
            if not is_x:
                hi, lo = hi + pad, (0 if lo == 0 else lo - pad)
            if hi == lo:
                hi = lo + pad
        self.lo, self.hi, self.log, self.p0, self.p1 = lo, hi, log, p0, p1

    def _v(self, v):
        return math.log10(v) if self.log else v

    def px(self, v):
        lo, hi = self._v(self.lo), self._v(self.hi)
        return self.p0 + (self._v(v) - lo) / (hi - lo) * (self.p1 - self.p0)

    def ticks(self):
        if self.log:
            d0, d1 = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            fine = d1 - d0 <= 3
            return [m * 10.0**d for d in range(d0, d1 + 1) for m in ((1, 2, 5) if fine else (1,))
                    if self.lo * 0.999 <= m * 10.0**d <= self.hi * 1.001]
        raw = (self.hi - self.lo) / 6
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if raw / mag <= m)
        v, out = math.ceil(self.lo / step) * step, []
        while v <= self.hi + 1e-9 * step:
            out.append(0.0 if abs(v) < 1e-12 * step else v)
            v += step
        return out


def _label(v):
    a = abs(v)
    return f"{v:.3g}" if a >= 1e6 or 0 < a < 1e-3 else f"{v:g}"


def write(path, title, xlabel, ylabel, series, logx=False, logy=False, width=720, height=420):
    """series: dicts with label, x, y (None or non-finite y leaves a gap), and optional
    dashed, markers. Written through a temporary file renamed into place."""
    W, H = width, height
    x = _Axis([v for s in series for v, w in zip(s["x"], s["y"]) if _usable(w, logy)], logx, ML, W - MR, True)
    y = _Axis([w for s in series for w in s["y"]], logy, H - MB, MT, False)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}' "
           "font-family='sans-serif' font-size='12'>", "<rect width='100%' height='100%' fill='white'/>"]
    for t in x.ticks():
        px = x.px(t)
        out.append(f"<line x1='{px:.1f}' y1='{MT}' x2='{px:.1f}' y2='{H - MB}' stroke='#ddd'/>")
        out.append(f"<text x='{px:.1f}' y='{H - MB + 16}' text-anchor='middle'>{_label(t)}</text>")
    for t in y.ticks():
        py = y.px(t)
        out.append(f"<line x1='{ML}' y1='{py:.1f}' x2='{W - MR}' y2='{py:.1f}' stroke='#ddd'/>")
        out.append(f"<text x='{ML - 6}' y='{py + 4:.1f}' text-anchor='end'>{_label(t)}</text>")
    out.append(f"<rect x='{ML}' y='{MT}' width='{W - ML - MR}' height='{H - MT - MB}' fill='none' stroke='#333'/>")
    out.append(f"<text x='{(ML + W - MR) // 2}' y='{H - 10}' text-anchor='middle'>{_esc(xlabel)}</text>")
    out.append(f"<text transform='translate(16,{(MT + H - MB) // 2}) rotate(-90)' text-anchor='middle'>"
               f"{_esc(ylabel)}</text>")
    out.append(f"<text x='{W // 2}' y='22' text-anchor='middle' font-size='15'>{_esc(title)}</text>")
    for i, s in enumerate(series):
        color, dash = PALETTE[i % len(PALETTE)], " stroke-dasharray='6,4'" if s.get("dashed") else ""
        pts, pieces = [], []
        for a, b in zip(s["x"], s["y"]):
            if _usable(a, logx) and _usable(b, logy):
                pts.append(f"{x.px(a):.1f},{y.px(b):.1f}")
            elif pts:
                pieces.append(pts)
                pts = []
        if pts:
            pieces.append(pts)
        for p in pieces:
            out.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.8'{dash} points='{' '.join(p)}'/>")
        if s.get("markers", True):
            for p in (q for piece in pieces for q in piece):
                cx, cy = p.split(",")
                out.append(f"<circle cx='{cx}' cy='{cy}' r='3' fill='{color}'/>")
        yy, xx = MT + 16 + 18 * i, W - MR - 190
        out.append(f"<line x1='{xx}' y1='{yy - 4}' x2='{xx + 22}' y2='{yy - 4}' stroke='{color}' "
                   f"stroke-width='2.5'{dash}/>")
        out.append(f"<text x='{xx + 28}' y='{yy}'>{_esc(s['label'])}</text>")
    out.append("</svg>")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)
