"""CDS's files: the per-feature table, the histogram, the summary, and scopes into an artifact.

Every file is written atomically (`atomic_write_bytes`): a reader sees the old file or the new
one. Under the output folder:

    features.csv / features.json / features.md   feature, id, name, CDS, outlier share, scope,
                                                 images used (and the ground truth if known)
    cds_histogram.png                            the CDS histogram, the threshold drawn
    summary.json                                 threshold rule, scopes, AUC when the ground
                                                 truth is known, outlier tokens, seconds/image

`write_scopes` puts each concept's scope (and its CDS and outlier share) into a CEDAR
artifact's catalog (`extra["catalog"]`, read back by `training.cedar.catalog.catalog_entry`)
and a `cds` block into its metrics, and rewrites the artifact through `TransformArtifact.save`
(staging folder, then rename; the weights are rewritten unchanged and their checksum with them).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from training.cds.result import CdsResult
from training.core.artifacts import MANIFEST, WEIGHTS, TransformArtifact
from training.core.errors import InputError
from training.core.files import atomic_write_bytes

TABLE_COLUMNS = ("feature", "id", "name", "cds", "outlier_share", "scope", "images", "truth")


def table_rows(result: CdsResult) -> list[dict[str, Any]]:
    return [f.to_json() for f in result.features]


def write_table(result: CdsResult, out: Path) -> list[Path]:
    """features.csv, features.json and features.md under `out`."""
    rows = table_rows(result)
    columns = [c for c in TABLE_COLUMNS if c != "truth" or any("truth" in r for r in rows)]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in columns})
    paths = [out / "features.csv", out / "features.json", out / "features.md"]
    atomic_write_bytes(paths[0], text.getvalue().encode())
    atomic_write_bytes(paths[1], (json.dumps(rows, indent=1) + "\n").encode())
    atomic_write_bytes(paths[2], markdown_table(result, columns).encode())
    return paths


def markdown_table(result: CdsResult, columns: list[str]) -> str:
    threshold = result.threshold
    lines = [
        f"# CDS of {len(result.features)} {result.feature_kind} features",
        "",
        f"Model {result.model}, layer {result.layer}, {result.images} images, top-m "
        f"{result.config.top_m}, shift {result.geometry.shift}. Threshold "
        f"{_fmt(threshold.value)} ({threshold.rule}: {threshold.reason}).",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in table_rows(result):
        cells = [_fmt(row.get(c)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4f}"
    return str(value).replace("|", "\\|")


def plot_histogram(result: CdsResult, path: Path, bins: int = 40) -> Path:
    """The CDS histogram (stacked by ground-truth kind when known) with the threshold drawn."""
    from training.core.plots import pyplot, save_figure

    plt = pyplot()

    cds = result.cds
    finite = np.isfinite(cds)
    figure, axis = plt.subplots(figsize=(6.4, 3.8))
    upper = float(cds[finite].max()) if finite.any() else 1.0
    edges = np.linspace(0.0, max(upper, 1e-3) * 1.02, bins + 1)
    kinds = [f.kind for f in result.features]
    if finite.any() and all(k is not None for k in kinds):
        names = list(dict.fromkeys(kinds))
        groups = [cds[finite & np.array([k == name for k in kinds])] for name in names]
        axis.hist(groups, bins=edges, stacked=True, label=names)
    elif finite.any():
        axis.hist(cds[finite], bins=edges, color="tab:blue", label="features")
    threshold = result.threshold
    if math.isfinite(threshold.value):
        axis.axvline(
            threshold.value,
            color="black",
            linestyle="--",
            label=f"threshold {threshold.value:.4f} ({threshold.rule})",
        )
    axis.set_xlabel("CDS (EMD / grid diagonal)")
    axis.set_ylabel("features")
    axis.set_title(
        f"CDS of {int(finite.sum())} {result.feature_kind} features, layer {result.layer}",
        fontsize=9,
    )
    axis.legend(fontsize=8)
    figure.tight_layout()
    return save_figure(figure, path)


def write_summary(summary: dict[str, Any], path: Path) -> Path:
    atomic_write_bytes(path, (json.dumps(_finite(summary), indent=2) + "\n").encode())
    return path


def _finite(value: Any) -> Any:
    """NaN and infinities → None, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_scopes(
    path: Path, result: CdsResult, scored: TransformArtifact, provenance: dict[str, Any]
) -> TransformArtifact:
    """Each concept's scope, CDS and outlier share into the CEDAR artifact at `path`.

    The artifact is read again; if its rotation or mean no longer match the ones scored, it
    was replaced meanwhile and nothing is written (InputError).
    """
    artifact = TransformArtifact.load(path)
    others = sorted(p.name for p in Path(path).iterdir() if p.name not in (MANIFEST, WEIGHTS))
    if others:
        raise InputError(
            f"{path} holds files besides the artifact ({', '.join(others)}) that rewriting it "
            "would drop; scopes not written"
        )
    same = np.array_equal(artifact.rotation, scored.rotation) and np.array_equal(
        artifact.mean, scored.mean
    )
    if not same:
        raise InputError(f"{path} changed while CDS was measured; scopes not written")
    catalog = [dict(entry) for entry in artifact.extra.get("catalog", [])]
    if len(catalog) != len(result.features):
        raise InputError(
            f"{path}: the catalog has {len(catalog)} entries, {len(result.features)} were scored"
        )
    by_concept = {int(e.get("concept", i)): i for i, e in enumerate(catalog)}
    for row in result.features:
        entry = catalog[by_concept.get(row.index, row.index)]
        entry["scope"] = row.scope
        entry["cds"] = None if not math.isfinite(row.cds) else round(row.cds, 6)
        share = row.outlier_share
        entry["cds_outlier_share"] = None if not math.isfinite(share) else round(share, 6)
    artifact.extra = {**artifact.extra, "catalog": catalog}
    artifact.metrics = {**artifact.metrics, "cds": _finite(provenance)}
    artifact.save(path, overwrite=True)
    return artifact
