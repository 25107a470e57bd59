"""latency_chart.py: Jepsen's latency plot of a recorded seckill run, as SVG by hand.

One point per completed operation: x its invoke time (s from the run's first
operation or fault), y its latency (ms, log
scale); the colour says how it completed (ok green, fail red, info grey), the shape
what it was (order a circle, pay a square, cancel a triangle). The faults of run.json
are shaded bands, each labelled with its kind and target (on the first of three lines
where the label clears the one before it; none where none does). Standard library only;
called by checker.py --chart OUT.svg (write_svg), nothing else.
"""
import math
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 960, 480
LEFT, RIGHT, TOP, BOTTOM = 70, 130, 40, 50     # margins around the plot area
COLOURS = {"ok": "#2ca02c", "fail": "#d62728", "info": "#8c8c8c"}
SHAPES = ("order", "pay", "cancel")
MIN_LATENCY_MS = 0.1                           # lower latencies drawn at this line
LABEL_LINES, LABEL_CHAR_W = 3, 6.2             # fault labels: lines, px per character


def shape(f, x, y, colour):
    """The SVG element of one point of operation kind f at (x, y)."""
    if f == "pay":
        return (f'<rect x="{x - 2.5:.1f}" y="{y - 2.5:.1f}" width="5" height="5" '
                f'fill="{colour}" fill-opacity="0.7"/>')
    if f == "cancel":
        return (f'<polygon points="{x:.1f},{y - 3.5:.1f} {x - 3:.1f},{y + 2.5:.1f} '
                f'{x + 3:.1f},{y + 2.5:.1f}" fill="{colour}" fill-opacity="0.7"/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}" fill-opacity="0.7"/>'


def write_svg(path, ops, config):
    """Writes the plot of ops (checker.Op) and config's faults (run.json) to path."""
    done = [op for op in ops if op.complete is not None]
    faults = config.get("faults", [])
    times = ([op.invoke for op in done] + [f["start"] for f in faults]
             + [f["end"] for f in faults]) or [0, 1000]
    t0, t1 = min(times), max(times)
    if t1 <= t0:
        t1 = t0 + 1000
    latencies = [max(op.complete - op.invoke, MIN_LATENCY_MS) for op in done] or [1, 1000]
    lo = math.floor(math.log10(min(latencies)))
    hi = max(math.ceil(math.log10(max(latencies))), lo + 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(t):
        return LEFT + (t - t0) / (t1 - t0) * plot_w

    def y_of(latency):
        return TOP + plot_h - (math.log10(latency) - lo) / (hi - lo) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14">'
           + escape(f"seckill latency: sku {config.get('sku')}, mode {config.get('mode')}, "
                    f"seed {config.get('seed')}, {len(done)} operations") + '</text>']
    label_ends = [-math.inf] * LABEL_LINES     # where each line's last label ends
    for fault in sorted(faults, key=lambda f: f["start"]):
        x0, x1 = x_of(fault["start"]), x_of(fault["end"])
        label = fault["kind"] + (f" {fault['target']}" if fault.get("target") else "")
        out.append(f'<rect x="{x0:.1f}" y="{TOP}" width="{max(x1 - x0, 1):.1f}" '
                   f'height="{plot_h}" fill="#f4a582" fill-opacity="0.3"/>')
        line = next((i for i, end in enumerate(label_ends) if end < x0), None)
        if line is not None:
            label_ends[line] = x0 + 2 + LABEL_CHAR_W * len(label)
            out.append(f'<text x="{x0 + 2:.1f}" y="{TOP + 12 + 13 * line}" fill="#b2182b">'
                       f'{escape(label)}</text>')
    for decade in range(lo, hi + 1):          # y axis: one line per decade
        y = y_of(10 ** decade)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" '
                   f'stroke="#dddddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{10 ** decade:g}</text>')
    step = nice_step((t1 - t0) / 1000 / 8)    # x axis: about 8 ticks, in seconds
    for n in range(math.floor((t1 - t0) / 1000 / step) + 1):
        tick = round(n * step, 9)
        x = x_of(t0 + tick * 1000)
        out.append(f'<line x1="{x:.1f}" y1="{TOP + plot_h}" x2="{x:.1f}" '
                   f'y2="{TOP + plot_h + 5}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">'
                   f'{tick:g}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" '
               f'fill="none" stroke="black"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
               f'time (s)</text>')
    out.append(f'<text x="16" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + plot_h / 2})">latency (ms)</text>')
    for op in done:
        out.append(shape(op.f, x_of(op.invoke),
                         y_of(max(op.complete - op.invoke, MIN_LATENCY_MS)),
                         COLOURS[op.type]))
    legend_x, y = LEFT + plot_w + 15, TOP + 10
    for name, colour in COLOURS.items():
        out.append(shape("order", legend_x, y, colour))
        out.append(f'<text x="{legend_x + 10}" y="{y + 4}">{name}</text>')
        y += 18
    for f in SHAPES:
        out.append(shape(f, legend_x, y, "black"))
        out.append(f'<text x="{legend_x + 10}" y="{y + 4}">{f}</text>')
        y += 18
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join(out) + "\n")


def nice_step(raw):
    """The 1, 2 or 5 times a power of ten nearest above raw (> 0)."""
    if raw <= 0:
        return 1
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
