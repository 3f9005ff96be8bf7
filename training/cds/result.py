"""The CDS table and summary: one `FeatureScore` per feature, and the `CdsResult` of a run.

With features of known scope (the constructed model), `CdsResult.ground_truth` gives the AUC
of CDS for global vs local features and the accuracy of each threshold rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.cds.config import CdsConfig
from training.cds.cropping import CropGeometry
from training.cds.emd import Threshold, choose_threshold, roc_auc
from training.cds.outliers import OutlierRule

KIND_SCOPE = {"local": "local", "context": "global", "register": "global"}


@dataclass
class FeatureScore:
    """One feature's row of the table."""

    index: int
    id: str
    name: str | None
    cds: float
    images: int
    outlier_share: float
    scope: str | None = None
    kind: str | None = None  # ground truth, when known by construction

    def to_json(self) -> dict[str, Any]:
        def clean(value: float) -> float | None:
            return None if not math.isfinite(value) else round(float(value), 6)

        row = {
            "feature": self.index,
            "id": self.id,
            "name": self.name,
            "cds": clean(self.cds),
            "outlier_share": clean(self.outlier_share),
            "scope": self.scope,
            "images": self.images,
        }
        if self.kind is not None:
            row["truth"] = self.kind
        return row


@dataclass
class CdsResult:
    """Every feature's score plus what the summary reports."""

    model: str
    feature_kind: str
    layer: int
    geometry: CropGeometry
    config: CdsConfig
    features: list[FeatureScore]
    threshold: Threshold
    outliers: OutlierRule
    positions: list[dict[str, Any]]
    images: int
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def cds(self) -> np.ndarray:
        return np.array([f.cds for f in self.features], dtype=np.float64)

    @property
    def seconds_per_image(self) -> float:
        return self.seconds.get("total", math.nan) / max(1, self.images)

    def ground_truth(self) -> dict[str, Any] | None:
        """AUC of CDS for global vs local features, and mean CDS / outlier share by kind."""
        kinds = [f.kind for f in self.features]
        if any(k is None for k in kinds):
            return None
        cds = self.cds
        is_global = np.array([KIND_SCOPE[k] == "global" for k in kinds])
        by_kind: dict[str, Any] = {}
        for kind in [*dict.fromkeys(kinds), "global"]:
            members = [
                f
                for f in self.features
                if (f.kind == kind if kind != "global" else KIND_SCOPE[f.kind] == "global")
            ]
            finite = [f for f in members if math.isfinite(f.cds)]
            by_kind[kind] = {
                "features": len(members),
                "scored": len(finite),
                "mean_cds": _mean([f.cds for f in finite]),
                "mean_outlier_share": _mean([f.outlier_share for f in finite]),
                "called_global": sum(f.scope == "global" for f in finite),
            }
        predicted = np.array([f.scope == "global" for f in self.features])
        scored = np.isfinite(cds)
        if not scored.any():
            return {"auc": math.nan, "accuracy_of_scope": math.nan, "by_kind": by_kind}
        by_rule = {}
        for rule in ("otsu", "median", "gmm"):
            value = choose_threshold(cds, rule).value
            by_rule[rule] = {
                "threshold": value,
                "accuracy": float(((cds >= value) == is_global)[scored].mean()),
            }
        return {
            "auc": roc_auc(cds, is_global),
            "accuracy_of_scope": float((predicted == is_global)[scored].mean()),
            "accuracy_by_rule": by_rule,
            "by_kind": by_kind,
        }

    def summary(self) -> dict[str, Any]:
        finite = self.cds[np.isfinite(self.cds)]
        counts = {s: sum(f.scope == s for f in self.features) for s in ("local", "global")}
        shares = {
            scope: _mean(
                [f.outlier_share for f in self.features if f.scope == scope and f.images > 0]
            )
            for scope in ("local", "global")
        }
        return {
            "model": self.model,
            "features": {
                "kind": self.feature_kind,
                "count": len(self.features),
                "scored": len(finite),
                "never_active": len(self.features) - len(finite),
            },
            "layer": self.layer,
            "geometry": {
                "grid_p": self.geometry.grid,
                "patch_n": self.geometry.patch,
                "shift_s": self.geometry.shift,
                "canvas_px": self.geometry.canvas,
                "crop_px": self.geometry.crop,
                "shared_patches": self.geometry.shared_side**2,
                "diagonal": self.geometry.diagonal,
            },
            "top_m": self.config.top_m,
            "images": self.images,
            "images_skipped": self.skipped,
            "threshold": self.threshold.to_json(),
            "scopes": counts,
            "cds": {
                "mean": _mean(finite.tolist()),
                "median": float(np.median(finite)) if len(finite) else None,
                "max": float(finite.max()) if len(finite) else None,
            },
            "outlier_tokens": {**self.outliers.to_json(), "top_positions": self.positions},
            "mean_outlier_share": shares,
            "ground_truth": self.ground_truth(),
            "seconds": self.seconds,
            "seconds_per_image": self.seconds_per_image,
        }


def _mean(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else None
