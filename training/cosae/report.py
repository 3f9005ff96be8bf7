"""The report of `strata eval cosae`: its table's columns, the Markdown table and the PNG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# column → (header, format) of the report table, in order
COLUMNS: dict[str, tuple[str, str]] = {
    "fvu_i": ("FVU i", ".3f"),
    "fvu_j": ("FVU j", ".3f"),
    "translation_fvu_ij": ("tr FVU i→j", ".3f"),
    "translation_fvu_ji": ("tr FVU j→i", ".3f"),
    "cosine_ij": ("cos i→j", ".3f"),
    "cosine_ji": ("cos j→i", ".3f"),
    "r1_ij": ("R@1 i→j", ".3f"),
    "r1_ji": ("R@1 j→i", ".3f"),
    "jaccard": ("Jaccard", ".3f"),
    "f1": ("F1", ".3f"),
    "correlation": ("corr", ".3f"),
    "live": ("live", "d"),
    "cycle_fvu_i": ("cycle i", ".3f"),
    "cycle_fvu_j": ("cycle j", ".3f"),
    "recovery": ("recovered", ".3f"),
    "seconds": ("s", ".1f"),
}
PLOTTED = (
    ("translation_fvu_ij", "translation FVU i→j (lower is better)"),
    ("r1_ij", "R@1 of translated queries i→j"),
    ("cosine_ij", "cosine, translated vs true i→j"),
    ("f1", "active-set F1 of pairs"),
    ("correlation", "per-concept correlation of pairs"),
    ("recovery", "shared factors recovered"),
)


def markdown_report(report: dict[str, Any]) -> str:
    """One table: a row per (fraction, method), a column per metric ('–' where undefined)."""
    pair = report["pair"]
    lines = [
        f"# CoSAE on {pair['name']}: {pair['domain_i']['name']} ({pair['domain_i']['dim']}-d, i) "
        f"vs {pair['domain_j']['name']} ({pair['domain_j']['dim']}-d, j)",
        "",
        f"Split {report['split']['train']} / {report['split']['val']} / {report['split']['test']}"
        f" (train / val / test); {report['config']['n_concepts']} concepts, "
        f"k_i = {report['config']['k_i']}, k_j = {report['config']['k_j']}; metrics on the test"
        " pairs. FVU: lower is better; R@1 chance "
        f"= {1 / max(report['split']['test'], 1):.4f}. Crosscoder: FVU from the joint code of"
        " both sides, translation and concepts from one-sided codes.",
        "",
    ]
    columns = [c for c in COLUMNS if any(r.get(c) is not None for r in report["results"])]
    headers = ["fraction", "pairs", "method", *(COLUMNS[c][0] for c in columns)]
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("|---" * (3 + len(columns)) + "|")
    for row in report["results"]:
        cells = [f"{row['fraction']:g}", str(row["pairs"]), row["method"]]
        cells += [_cell(row.get(c), COLUMNS[c][1]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, spec)


def plot_against_fraction(report: dict[str, Any], path: Path) -> Path:
    """Each plotted metric against the paired fraction (log scale, labelled at the fractions
    run, their pair counts on the top axis), a line per method; FVU panels log-scaled and
    labelled at round values; the test pairs in the title, the legend outside."""
    from training.core.plots import (
        legend_outside,
        log_axis,
        log_ticks,
        pyplot,
        sample_label,
        save_figure,
        series_styles,
    )

    plt = pyplot()
    panels = [(m, t) for m, t in PLOTTED if any(r.get(m) is not None for r in report["results"])]
    styles = series_styles(report["methods"])
    fractions = sorted({float(r["fraction"]) for r in report["results"]})
    pairs = {float(r["fraction"]): int(r["pairs"]) for r in report["results"] if "pairs" in r}
    columns = 3
    rows = max(1, math.ceil(len(panels) / columns))
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.5 * rows), squeeze=False)
    for axis, (metric, title) in zip(axes.flat, panels, strict=False):
        for method in report["methods"]:
            points = [
                (r["fraction"], r[metric])
                for r in report["results"]
                if r["method"] == method and r.get(metric) is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                axis.plot(xs, ys, label=method, **styles[method])
        log_ticks(axis, "x", fractions, text=fraction_text)
        if pairs:
            top = axis.secondary_xaxis("top")
            shown = [f for f in axis.get_xticks() if f in pairs]
            top.set_xticks(shown)
            top.set_xticklabels([f"{pairs[f]:,}" for f in shown], fontsize=7, color="0.35")
            top.tick_params(length=0)
            top.minorticks_off()
        if "fvu" in metric:  # a least-squares map with fewer pairs than dims explodes
            log_axis(axis, "y", [r[metric] for r in report["results"] if r.get(metric)])
        axis.set_xlabel("paired fraction (top: pairs)" if pairs else "paired fraction")
        axis.set_title(title, fontsize=9)
    for axis in list(axes.flat)[len(panels) :]:
        axis.axis("off")
    test = int(report.get("split", {}).get("test", 0))
    scored = f", scored on the test split ({sample_label(test, 'pairs')})" if test else ""
    figure.suptitle(
        f"CoSAE and baselines on {report['pair']['name']}: each metric against the share of "
        f"training rows paired{scored}",
        fontsize=10,
    )
    figure.tight_layout()
    legend_outside(figure, list(axes.flat[: len(panels)]), title="method")
    return save_figure(figure, path)


def fraction_text(value: float) -> str:
    """A paired fraction as a percentage: 0.001 → '0.1%', 0.5 → '50%'."""
    return f"{100 * value:.3g}%"
