"""`strata eval grasp`: every GraSP metric for any transform on any labelled set
(docs/reference/metrics.md).

A transform is any function from embeddings [N, D] to rotated embeddings (an artifact's
`apply`, or a baseline adapter). Outputs: a JSON-able report, a Markdown table, and a PNG of HN
accuracy against prefix length, one line per negative type, contract boundaries marked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from training.core.granularity import Contract, Granularity
from training.core.metrics import (
    NEGATIVE_LEVELS,
    drift,
    hard_negative_table,
    prefix_cosine,
    prefix_vectors,
    present_rows,
    recall_at,
    selectivity,
    staircase,
    target_ranks,
)
from training.grasp.data import GraspSet

Transform = Callable[[np.ndarray], np.ndarray]
RECALL_AT = (1, 10)


def plot_lengths(contract: Contract, steps: int = 32) -> list[int]:
    """The contract's prefixes plus an even grid of `steps` lengths, for the HN curves."""
    dim = contract[Granularity.FULL]
    grid = {max(1, round(dim * i / steps)) for i in range(1, steps + 1)}
    return sorted(grid | set(contract.values()))


def gallery_items(views: np.ndarray) -> np.ndarray:
    """The gallery item of each row, 0..G-1: rows with equal views (one text, "a dog" in many
    scenes) are one item. Computed on the untransformed views: a transform's rounding noise must
    not split one text into several items."""
    _, inverse = np.unique(np.round(views, 5), axis=0, return_inverse=True)
    return inverse.reshape(-1)


def retrieval_recall(
    anchors: np.ndarray,
    views: np.ndarray,
    length: int,
    ks: tuple[int, ...] = RECALL_AT,
    items: np.ndarray | None = None,
) -> dict[int, float]:
    """Recall@k of each anchor's own view among all distinct views, at prefix `length`.

    `items` (default: `gallery_items(views)`) says which rows share one gallery item, so a hit
    is retrieving the right text, not the right row. A tie with another item counts as a miss.
    """
    target = gallery_items(views) if items is None else np.asarray(items)
    _, first = np.unique(target, return_index=True)
    dtype = np.result_type(anchors, views, np.float32).type  # float64 rows are scored in float64
    q = prefix_vectors(anchors, length, dtype)
    g = prefix_vectors(views[first], length, dtype)
    return recall_at(target_ranks(q, g, target, ties="against"), ks)


def evaluate(transform: Transform, data: GraspSet, contract: Contract) -> dict[str, Any]:
    """All GraSP metrics of `transform` on `data` (rotated with the transform first)."""
    anchors = transform(data.anchors)
    views = {g: transform(v) for g, v in data.views.items()}
    positives = views[Granularity.CAPTION]
    negatives = {k: transform(n) for k, n in data.negatives.items()}
    lengths = plot_lengths(contract)
    table = hard_negative_table(anchors, positives, negatives, lengths)
    partner = np.roll(np.arange(len(anchors)), 1)
    drift_pairs = max(
        drift(data.anchors, data.views[Granularity.CAPTION], anchors, positives),
        drift(data.anchors, data.anchors[partner], anchors, anchors[partner]),
    )
    items = {g: gallery_items(v) for g, v in data.views.items()}
    retrieval = {
        g.value: {
            str(n): {
                f"R@{k}": r for k, r in retrieval_recall(anchors, v, n, items=items[g]).items()
            }
            for n in sorted(set(contract.values()))
        }
        for g, v in views.items()
    }
    return {
        "rows": len(data),
        "contract": {g.value: n for g, n in contract.items()},
        "selectivity": selectivity(table, contract),
        "staircase": staircase(table, contract),
        "drift": drift_pairs,
        "hn": {kind: {str(n): acc for n, acc in row.items()} for kind, row in table.items()},
        "hn_triples": {kind: int(present_rows(negatives[kind]).sum()) for kind in table},
        "hn_at_level": {kind: table[kind][contract[NEGATIVE_LEVELS[kind]]] for kind in table},
        "retrieval": retrieval,
        "mean_full_cosine": float(prefix_cosine(anchors, positives, anchors.shape[1]).mean()),
    }


def markdown_table(reports: dict[str, dict[str, Any]]) -> str:
    """One row per method: selectivity, staircase, drift, object R@1 at D/16 and at D."""
    lines = [
        "| method | selectivity | staircase | drift | object R@1 @D/16 | object R@1 @D |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in reports.items():
        first, full = str(r["contract"]["object"]), str(r["contract"]["full"])
        obj = r["retrieval"]["object"]
        lines.append(
            f"| {name} | {r['selectivity']:.4f} | {r['staircase']:.2f} | {r['drift']:.1e} "
            f"| {obj[first]['R@1']:.3f} | {obj[full]['R@1']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def agreement_table(reports: dict[str, dict[str, Any]]) -> str:
    """One row per method: Spearman and NDCG@10 at every contract prefix."""
    first = next(r for r in reports.values() if "agreement" in r)
    lengths = list(first["agreement"]["prefix"])
    header = " | ".join(f"ℓ={n}" for n in lengths)
    lines = [f"| method | {header} |", "|---|" + "---:|" * len(lengths)]
    for name, report in reports.items():
        cells = [
            f"{v['spearman']:.3f} / {v['ndcg@10']:.3f}"
            for v in report["agreement"]["prefix"].values()
        ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def plot_hn_curves(
    reports: dict[str, dict[str, Any]], path: Path, split: str | None = None
) -> Path:
    """HN accuracy against prefix length, one panel per method, one line per negative type
    (its triples in the legend, a small count flagged); the contract's prefixes labelled on a
    top axis, chance dotted, the legend outside."""
    from training.core.plots import (
        legend_outside,
        log_ticks,
        pyplot,
        sample_label,
        save_figure,
        series_styles,
    )

    plt = pyplot()
    columns = min(3, len(reports))
    rows = -(-len(reports) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.4 * columns, 3.6 * rows), squeeze=False, sharey=True
    )
    for ax in axes.flat[len(reports) :]:
        ax.set_visible(False)
    first = next(iter(reports.values()))
    styles = series_styles(k for r in reports.values() for k in r["hn"])
    triples = first.get("hn_triples", {})
    labels = {
        kind: f"{kind} ({sample_label(triples[kind], 'triples')})" if kind in triples else kind
        for kind in styles
    }
    for ax, (name, report) in zip(axes.flat, reports.items(), strict=False):
        for kind, row in report["hn"].items():
            lengths = sorted(int(n) for n in row)
            ax.plot(lengths, [row[str(n)] for n in lengths], label=labels[kind], **styles[kind])
        contract = report["contract"]
        for n in contract.values():
            ax.axvline(n, color="0.85", linewidth=0.8, zorder=0)
        ax.axhline(0.5, color="0.5", linestyle=":", linewidth=0.8)
        lengths = sorted({int(n) for row in report["hn"].values() for n in row})
        log_ticks(ax, "x", sorted({lengths[0], *contract.values()}), base=2)
        top = ax.secondary_xaxis("top")
        top.set_xticks(list(contract.values()))
        top.set_xticklabels(list(contract), fontsize=7, color="0.35")
        top.tick_params(length=0)
        top.minorticks_off()
        lowest = min(v for row in report["hn"].values() for v in row.values())
        ax.set_ylim(min(0.4, lowest - 0.03), 1.02)
        ax.set_title(
            f"{name}: selectivity {report['selectivity']:.3f}, staircase {report['staircase']:.1f}",
            fontsize=9,
        )
        ax.set_xlabel("prefix length ℓ")
    for row in axes:
        row[0].set_ylabel("HN accuracy (chance 0.5)")
    where = f"{split} split, " if split else ""
    fig.suptitle(
        "Hard negatives ranked below the positive, by prefix length "
        f"({where}{sample_label(int(first.get('rows', 0)))})",
        fontsize=10,
    )
    fig.tight_layout()
    legend_outside(fig, list(axes.flat[: len(reports)]), title="negative type")
    return save_figure(fig, path)
