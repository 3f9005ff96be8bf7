"""`strata eval cedar`: CEDAR and its baselines under one metric code.

Every method is a `SparseMethod`: a reconstruction at a per-sample k, the active concepts at k,
and one direction per concept for naming. Rotations (CEDAR, identity, PCA, random) have 2D
signed concepts; the sparse autoencoders have one concept per latent. For each K of `KS`:
FVU (training.core.metrics), CKNNA (k = 10, on a fixed subsample), and linear-probe cross-entropy
on each labelled task; concept purity where the rows carry ground-truth factors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from training.cedar.catalog import name_directions, signed_directions
from training.cedar.sparse_codes import concept_ids, reconstruct, sparse_codes
from training.core.metrics import cknna, fraction_of_variance_unexplained
from training.probes import LinearProbe
from training.sae.base import SparseAutoencoder
from training.sae.train import reconstruct as sae_reconstruct

KS = (4, 8, 16, 32, 64, 128)
CKNNA_ROWS = 2000
PURITY_PRECISION = 0.8
PURITY_RECALL = 0.1


@dataclass
class SparseMethod:
    name: str
    reconstruct: Callable[[np.ndarray, int], np.ndarray]
    concepts: Callable[[np.ndarray, int], np.ndarray]  # [N, k] active concept ids
    directions: np.ndarray  # [C, D], one per concept, for naming
    seconds: float | None = None  # training time, where it was trained here
    signed: bool = False  # concepts 2j and 2j + 1 are the two signs of one axis


def rotation_method(
    name: str, rotation: np.ndarray, mean: np.ndarray, seconds: float | None = None
) -> SparseMethod:
    """A rotation + top-k method (CEDAR, identity, PCA, random)."""
    rotation = np.asarray(rotation, dtype=np.float32)
    mean = np.asarray(mean, dtype=np.float32)
    return SparseMethod(
        name=name,
        reconstruct=lambda x, k: reconstruct(x, rotation, mean, k),
        concepts=lambda x, k: concept_ids(*sparse_codes(x, rotation, mean, k)),
        directions=signed_directions(rotation),
        seconds=seconds,
        signed=True,
    )


def sae_method(name: str, model: SparseAutoencoder, seconds: float | None = None) -> SparseMethod:
    """A sparse autoencoder: one concept per latent, named by its decoder direction."""

    def concepts(x: np.ndarray, k: int) -> np.ndarray:
        with torch.no_grad():
            acts = model.activations(torch.as_tensor(np.asarray(x, np.float32)))
        return acts.topk(k, dim=1).indices.numpy()

    with torch.no_grad():
        directions = model.dictionary().T.double().numpy()
    return SparseMethod(
        name=name,
        reconstruct=lambda x, k: sae_reconstruct(model, x, k),
        concepts=concepts,
        directions=directions,
        seconds=seconds,
    )


# --- ground-truth factors of the compositional set -------------------------------------------

FACTOR_COLUMNS = {
    "subject": "noun",
    "object": "noun",
    "subject_attribute": "adjective",
    "object_attribute": "adjective",
    "relation": "first",
    "place": "last",
}


def factor_word(value: str, how: str) -> str:
    """The word a factor is named by: 'sitting on' → 'sitting', 'on the beach' → 'beach'."""
    words = value.split()
    return words[-1] if how == "last" else words[0]


def factor_rows(metadata: pa.Table) -> dict[str, np.ndarray]:
    """factor word → boolean mask of the rows that carry it (in any column)."""
    masks: dict[str, np.ndarray] = {}
    for column, how in FACTOR_COLUMNS.items():
        if column not in metadata.column_names:
            continue
        values = metadata.column(column).to_pylist()
        for value in set(values):
            word = factor_word(value, how)
            hit = np.array([v == value for v in values])
            masks[word] = masks.get(word, np.zeros(len(values), bool)) | hit
    return masks


def concept_purity(
    active: np.ndarray, names: Sequence[str], factors: dict[str, np.ndarray]
) -> dict[str, Any]:
    """For each factor, the concept named after it that best matches it (highest F1).

    precision = P(factor | concept active), recall = P(concept active | factor). A factor counts
    as found when that concept has precision ≥ PURITY_PRECISION and recall ≥ PURITY_RECALL — the
    recall floor keeps a concept that fires on a handful of rows from counting as pure (with
    thousands of latents, some always do); `share` is the fraction of factors found.
    """
    n_concepts = len(names)
    fires = np.zeros((active.shape[0], n_concepts), dtype=bool)
    np.put_along_axis(fires, active, True, axis=1)
    per_factor: dict[str, Any] = {}
    for word, has in sorted(factors.items()):
        best = None
        for c in (c for c in range(n_concepts) if names[c] == word):
            on = fires[:, c]
            if not on.any():
                continue
            hit = float((on & has).sum())
            precision, recall = hit / on.sum(), hit / max(has.sum(), 1)
            f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
            if best is None or f1 > best["f1"]:
                best = {"concept": c, "precision": precision, "recall": recall, "f1": f1}
        per_factor[word] = best
    found = [
        w
        for w, b in per_factor.items()
        if b and b["precision"] >= PURITY_PRECISION and b["recall"] >= PURITY_RECALL
    ]
    return {
        "share": len(found) / max(len(factors), 1),
        "found": found,
        "named": sum(b is not None for b in per_factor.values()),
        "factors": per_factor,
    }


# --- the evaluation ----------------------------------------------------------------------------


@dataclass
class LabelledTask:
    name: str
    probe: LinearProbe
    test_labels: np.ndarray  # -1 where the test row's label is not a probe class


def evaluate_method(
    method: SparseMethod,
    test: np.ndarray,
    ks: Sequence[int] = KS,
    tasks: Sequence[LabelledTask] = (),
    cknna_rows: np.ndarray | None = None,
    factors: dict[str, np.ndarray] | None = None,
    vocabulary: tuple[Sequence[str], np.ndarray, np.ndarray] | None = None,
    purity_k: int = 32,
) -> dict[str, Any]:
    """Every metric of one method on the test rows."""
    result: dict[str, Any] = {"fvu": {}, "cknna": {}, "lp": {t.name: {} for t in tasks}}
    sample = cknna_rows if cknna_rows is not None else np.arange(min(len(test), CKNNA_ROWS))
    for k in ks:
        if k > test.shape[1] and method.directions.shape[0] <= 2 * test.shape[1]:
            continue
        x_hat = method.reconstruct(test, k)
        result["fvu"][k] = fraction_of_variance_unexplained(test, x_hat)
        result["cknna"][k] = cknna(test[sample], x_hat[sample])
        for task in tasks:
            keep = task.test_labels >= 0
            result["lp"][task.name][k] = task.probe.cross_entropy(
                x_hat[keep], task.test_labels[keep]
            )
    if factors and vocabulary:
        words, word_embeddings, mean = vocabulary
        names = [c.name for c in name_directions(method.directions, mean, words, word_embeddings)]
        result["purity"] = concept_purity(method.concepts(test, purity_k), names, factors)
        result["purity"]["k"] = purity_k
    if method.seconds is not None:
        result["train_seconds"] = method.seconds
    return result


def markdown_report(report: dict[str, Any]) -> str:
    """FVU, CKNNA and LP tables (methods × K) and the purity summary."""
    methods = report["methods"]
    ks = report["ks"]
    lines = [f"# CEDAR evaluation: {report['dataset']}", ""]
    lines += [f"Test rows: {report['test_rows']}; default k {report['k']}.", ""]

    def table(title: str, cell: Callable[[dict[str, Any], int], float | None], fmt: str) -> None:
        lines.extend([f"## {title}", "", "| method | " + " | ".join(f"K={k}" for k in ks) + " |"])
        lines.append("|---|" + "---:|" * len(ks))
        for name, result in methods.items():
            cells = [cell(result, k) for k in ks]
            shown = [format(v, fmt) if v is not None else "–" for v in cells]
            lines.append(f"| {name} | " + " | ".join(shown) + " |")
        lines.append("")

    table("FVU (lower is better)", lambda r, k: r["fvu"].get(k), ".4f")
    table(
        "CKNNA, original vs reconstruction (higher is better)",
        lambda r, k: r["cknna"].get(k),
        ".3f",
    )
    for task, reference in report.get("lp_reference", {}).items():
        table(
            f"Linear probe cross-entropy, {task} (originals: {reference:.3f}; lower is better)",
            lambda r, k, t=task: r["lp"][t].get(k),
            ".3f",
        )
    purity = {n: r["purity"] for n, r in methods.items() if "purity" in r}
    if purity:
        lines += ["## Concept purity", ""]
        lines += [
            f"Share of the {report['factors']} ground-truth factors with a concept named after "
            f"them at precision ≥ {PURITY_PRECISION} and recall ≥ {PURITY_RECALL} "
            f"(the concept with the best F1; k = {next(iter(purity.values()))['k']}).",
            "",
            "| method | share | factors with a named concept |",
            "|---|---:|---:|",
        ]
        lines += [f"| {n} | {p['share']:.3f} | {p['named']} |" for n, p in purity.items()]
        lines.append("")
    times = {n: r["train_seconds"] for n, r in methods.items() if "train_seconds" in r}
    if times:
        lines += ["## Training time here", "", "| method | seconds |", "|---|---:|"]
        lines += [f"| {n} | {s:.1f} |" for n, s in times.items()]
        lines.append("")
    return "\n".join(lines)


def plot_fvu_curves(report: dict[str, Any], path: Path) -> Path:
    """FVU against K (log-log), one line per method, and beside it each method's FVU as a
    ratio to CEDAR's at the same K (where CEDAR was scored), which separates the curves that
    overlap on the left; the legend outside, the test rows in the title."""
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
    methods = report["methods"]
    styles = series_styles(methods)
    reference = "cedar" if "cedar" in methods else None
    panels = 2 if reference else 1
    figure, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 3.9), squeeze=False)
    curve, ratio = axes[0][0], axes[0][-1]
    fvu = {name: {int(k): v for k, v in r["fvu"].items()} for name, r in methods.items()}
    ks_all = sorted({k for curve_of in fvu.values() for k in curve_of})
    for name, curve_of in fvu.items():
        ks = sorted(curve_of)
        curve.plot(ks, [curve_of[k] for k in ks], label=name, **styles[name])
        if reference:
            shared = [k for k in ks if k in fvu[reference]]
            ratio.plot(
                shared,
                [curve_of[k] / fvu[reference][k] for k in shared],
                label=name,
                **styles[name],
            )
    log_ticks(curve, "x", ks_all, base=2)
    curve.set_xlabel("active features per sample K")
    curve.set_ylabel("FVU (lower is better)")
    log_axis(curve, "y", [v for curve_of in fvu.values() for v in curve_of.values()])
    curve.set_title("FVU of the reconstruction")
    if reference:
        log_ticks(ratio, "x", ks_all, base=2)
        ratios = [
            v / fvu[reference][k] for c in fvu.values() for k, v in c.items() if k in fvu[reference]
        ]
        log_axis(ratio, "y", [*ratios, 1.0])
        ratio.axhline(1.0, color="0.5", linewidth=0.8, zorder=0)
        ratio.set_xlabel("active features per sample K")
        ratio.set_ylabel("FVU ÷ CEDAR's FVU (> 1: worse than CEDAR)")
        ratio.set_title("relative to CEDAR")
    dataset = Path(str(report.get("dataset", ""))).name or "the cache"
    figure.suptitle(
        f"CEDAR and baselines: reconstruction error against sparsity K, {dataset} test split "
        f"({sample_label(int(report.get('test_rows', 0)))})",
        fontsize=10,
    )
    figure.tight_layout()
    legend_outside(figure, curve, title="method")
    return save_figure(figure, path)


def frequent_concepts_markdown(
    catalog: Sequence[dict[str, Any]],
    concepts: np.ndarray,
    activations: np.ndarray,
    texts: Sequence[str],
    top: int = 20,
    examples: int = 3,
) -> str:
    """The `top` most frequent concepts on the rows, each with its name and example texts."""
    counts = np.bincount(concepts.reshape(-1), minlength=len(catalog))
    lines = [
        f"# The {top} most frequent CEDAR concepts",
        "",
        f"On {len(texts)} rows, k = {concepts.shape[1]}. Frequency: share of rows where the "
        "concept is active; examples: the rows where it is most strongly active.",
        "",
    ]
    for rank, c in enumerate(np.argsort(-counts, kind="stable")[:top], start=1):
        entry = catalog[c]
        strength = np.where(concepts == c, activations, 0.0).max(axis=1)
        best = np.argsort(-strength, kind="stable")[:examples]
        runners = ", ".join(w for w, _ in entry["runner_ups"][:3])
        lines.append(
            f"{rank}. **{entry['name']}** ({entry['label']}, score {entry['score']:.2f}; "
            f"then {runners}) — active in {counts[c] / len(texts):.1%} of rows"
        )
        lines += [f"   - {texts[i]}" for i in best]
    return "\n".join(lines) + "\n"
