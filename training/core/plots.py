"""The one plotting style of every figure Strata writes (fvu_k.png, hn_curves.png,
gallery_ap.png, metrics.png, cds_histogram.png).

    plt = pyplot()                               # matplotlib on Agg, the house settings
    style = series_styles(["cedar", "pca"])      # name → colour, marker, line style
    axis.plot(xs, ys, label="cedar", **style["cedar"])
    log_ticks(axis, "x", [4, 8, 16, 32], base=2) # ticks at the data, no minor labels
    legend_outside(figure, axis)                 # to the right of every panel, never on data
    save_figure(figure, path)                    # atomic PNG, cropped to what was drawn

Rules: each series differs in colour, marker and line style (readable in grey and for the
colour-blind); legends sit outside the data; titles say what is plotted and on how many
samples (`sample_label`, which flags a sample below SMALL_SAMPLE); log axes are labelled only
at chosen ticks, thinned so that no two labels collide. matplotlib is imported only inside
these functions.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from training.core.files import atomic_write_bytes

COLOURS = (
    "#0072B2",  # Okabe-Ito, colour-blind safe, then tab10's remaining hues
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#8C564B",
    "#7F7F7F",
    "#BCBD22",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
LINE_STYLES: tuple[Any, ...] = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
SMALL_SAMPLE = 100  # below this many samples a figure flags its estimate as noisy
DPI = 120
MIN_TICK_GAP = 0.09  # of an axis's width in log space: closer tick labels are thinned


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend with the house settings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 10,
            "axes.labelsize": 9,
            "xtick.labelsize": 8,
            "ytick.labelsize": 8,
            "legend.fontsize": 8,
            "legend.frameon": False,
            "lines.linewidth": 1.6,
            "lines.markersize": 5,
            "figure.dpi": DPI,
        }
    )
    return plt


def series_style(index: int) -> dict[str, Any]:
    """Colour, marker and line style of the index-th series: all three differ between any two
    of the first 10 series (markers and dashes cycle at other periods beyond)."""
    return {
        "color": COLOURS[index % len(COLOURS)],
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
    }


def series_styles(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """One style per name, in order: the same name keeps its style across panels."""
    return {name: series_style(n) for n, name in enumerate(dict.fromkeys(names))}


def sample_label(count: int, what: str = "rows", small: int = SMALL_SAMPLE) -> str:
    """'n = 2,000 rows', or 'n = 36 rows, small: ±0.08' (the largest binomial standard error
    of a share estimated on `count` samples, 0.5/√n) when `count` < `small`."""
    text = f"n = {count:,} {what}"
    if 0 < count < small:
        text += f", small: ±{0.5 / math.sqrt(count):.2f}"
    return text


def thinned_ticks(values: Sequence[float], min_gap: float = MIN_TICK_GAP) -> list[float]:
    """The ticks of a log axis to label: from the smallest, each at least `min_gap` of the
    axis's log width past the previous one kept (the largest always kept, dropping the one
    before it if they would collide)."""
    ticks = sorted({float(v) for v in values if v > 0})
    if len(ticks) <= 2:
        return ticks
    span = math.log(ticks[-1]) - math.log(ticks[0])
    gap = min_gap * span
    kept = [ticks[0]]
    for value in ticks[1:-1]:
        if math.log(value) - math.log(kept[-1]) >= gap:
            kept.append(value)
    while len(kept) > 1 and math.log(ticks[-1]) - math.log(kept[-1]) < gap:
        kept.pop()
    return [*kept, ticks[-1]]


def tick_text(value: float) -> str:
    """A tick label: integers plainly (1,024), fractions by their significant digits (0.001)."""
    if value >= 1 and float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"


def log_ticks(
    axis: Any,
    which: str,
    values: Sequence[float],
    base: float = 10,
    text: Callable[[float], str] | None = None,
) -> None:
    """A log axis labelled at `values` (thinned so that labels never collide) by `text`
    (default `tick_text`), no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ticks = thinned_ticks(values)
    scale = axis.set_xscale if which == "x" else axis.set_yscale
    scale("log", base=base)
    target = axis.xaxis if which == "x" else axis.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_ticklabels([(text or tick_text)(t) for t in ticks])
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


MANTISSAS = (
    (1.0,),
    (1.0, 2.0, 5.0),
    (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
    (1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0),
)


def nice_log_ticks(values: Iterable[float], at_least: int = 4) -> list[float]:
    """Round ticks for a log axis over `values`: m × 10ⁿ with m from the coarsest of MANTISSAS
    (whole decades, 1-2-5, …) that puts `at_least` ticks from the largest at or below the
    smallest value to the smallest at or above the largest (the finest set otherwise), so that
    the ticks bound the data."""
    positive = [float(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not positive:
        return []
    lo, hi = min(positive), max(positive)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks: list[float] = []
    for mantissas in MANTISSAS:
        grid = [float(f"{m * 10.0**d:.6g}") for d in range(first - 1, last + 2) for m in mantissas]
        below = max(t for t in grid if t <= lo * (1 + 1e-9))
        above = min(t for t in grid if t >= hi * (1 - 1e-9))
        ticks = [t for t in grid if below <= t <= above]
        if len(ticks) >= at_least:
            break
    return ticks if len(ticks) >= 2 else [ticks[0], ticks[0] * 1.1]


def log_axis(axis: Any, which: str, values: Iterable[float]) -> None:
    """A base-10 log axis over `values`, labelled plainly (0.2, 0.5, 1, 20) at round ticks
    (`nice_log_ticks`, thinned), its limits the outermost ticks; no minor labels."""
    ticks = nice_log_ticks(values)
    if not ticks:
        return
    log_ticks(axis, which, ticks, base=10)
    (axis.set_xlim if which == "x" else axis.set_ylim)(ticks[0], ticks[-1])


def legend_outside(figure: Any, source: Any, title: str | None = None, **handles: Any) -> Any:
    """The figure's one legend, to the right of every panel (never over data): entries from
    `source` (an axis, or a list of axes whose entries are merged by label), or explicit
    `handles=` and `labels=`."""
    if "handles" in handles:
        entries, labels = handles["handles"], handles["labels"]
    else:
        axes = source if isinstance(source, list | tuple) else [source]
        seen: dict[str, Any] = {}
        for axis in axes:
            for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
        entries, labels = list(seen.values()), list(seen)
    return figure.legend(
        entries,
        labels,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        title=title,
        title_fontsize=8,
    )


def save_figure(figure: Any, path: Path) -> Path:
    """Write the figure as a PNG atomically, cropped to what was drawn (an outside legend
    included), and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.1)
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path
