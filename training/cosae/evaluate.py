"""`strata eval cosae`: CoSAE and every baseline on one split, for each paired fraction.

For each fraction ρ the paired subset is the first ⌈ρ·N_train⌉ training rows of the split's
fixed order (nested across fractions); every method is fitted on the same training rows and
pairs and scored on the test rows by `score_method`, the one metric code. The uncoupled SAEs
need no pairs, so they are trained once and only their matching changes with ρ.

Long runs survive interruption: each (method, fraction) result is written atomically as soon as
it is known, keyed by the config, the data and the method, and a rerun skips those already
there; the coupled models also checkpoint inside their training.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.core.files import atomic_write_bytes
from training.cosae.baselines import (
    LinearMap,
    least_squares_map,
    match_concepts,
    orthogonal_procrustes,
    train_uncoupled,
    train_universal_sae,
    with_domain_j_reordered,
)
from training.cosae.config import CosaeConfig
from training.cosae.crosscoder import Crosscoder, train_crosscoder
from training.cosae.metrics import (
    concept_consistency,
    cycle_fvu,
    extraction_fvu,
    mean_cosine,
    recall_at_1,
    shared_factor_recovery,
    translation_fvu,
)
from training.cosae.model import CoupledSae, encode_rows, reconstruct_rows, translate_rows
from training.cosae.pairs import EmbeddingPair, PairSplit, checked_fraction, split_pair
from training.cosae.train import CoupledResult, train_coupled

log = logging.getLogger(__name__)

METHODS = (
    "cosae", "procrustes", "least-squares", "crosscoder", "universal-sae", "uncoupled-matched",
    "uncoupled",
)  # fmt: skip
DEFAULT_FRACTIONS = (0.001, 0.01, 0.1, 1.0)
RESULT_FORMAT = "strata.cosae-result/1"

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


@dataclass
class CoupledMethod:
    """What every method offers the metric code; None where a method has no such thing.

    `reconstruct(x_i, x_j)` → (x̂_i, x̂_j) of the held-out pairs (a crosscoder uses both sides);
    `translate(x, source)` → rows in the other domain; `encode(x, domain)` → concept codes.
    """

    name: str
    translate: Callable[[np.ndarray, str], np.ndarray]
    reconstruct: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    encode: Callable[[np.ndarray, str], np.ndarray] | None = None
    seconds: float | None = None


def coupled_sae_method(name: str, model: CoupledSae, seconds: float | None) -> CoupledMethod:
    """CoSAE, the universal SAE and the (matched or not) uncoupled SAEs."""
    return CoupledMethod(
        name=name,
        translate=lambda x, source: translate_rows(model, x, source),
        reconstruct=lambda x_i, x_j: (
            reconstruct_rows(model, x_i, "i"),
            reconstruct_rows(model, x_j, "j"),
        ),
        encode=lambda x, domain: encode_rows(model, x, domain),
        seconds=seconds,
    )


def linear_method(name: str, linear: LinearMap, seconds: float | None) -> CoupledMethod:
    """A linear map: translation only (no concepts, no reconstruction)."""
    return CoupledMethod(name=name, translate=linear.translate, seconds=seconds)


def crosscoder_method(name: str, model: Crosscoder, seconds: float | None) -> CoupledMethod:
    """Joint codes for reconstruction; one-sided codes for translation and concepts."""

    @torch.no_grad()
    def codes(x_i: np.ndarray | None, x_j: np.ndarray | None) -> torch.Tensor:
        def tensor(x: np.ndarray | None) -> torch.Tensor | None:
            return None if x is None else torch.as_tensor(np.asarray(x, np.float32))

        return model.encode(tensor(x_i), tensor(x_j))

    @torch.no_grad()
    def reconstruct(x_i: np.ndarray, x_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        joint = codes(x_i, x_j)
        return model.decode(joint, "i").numpy(), model.decode(joint, "j").numpy()

    @torch.no_grad()
    def translate(x: np.ndarray, source: str) -> np.ndarray:
        one_sided = codes(x, None) if source == "i" else codes(None, x)
        return model.decode(one_sided, "j" if source == "i" else "i").numpy()

    def encode(x: np.ndarray, domain: str) -> np.ndarray:
        return (codes(x, None) if domain == "i" else codes(None, x)).numpy()

    return CoupledMethod(name, translate, reconstruct, encode, seconds)


def score_method(
    method: CoupledMethod,
    x_i: np.ndarray,
    x_j: np.ndarray,
    shared_factors: np.ndarray | None = None,
) -> dict[str, float | int | None]:
    """Every metric of `training.cosae.metrics` for one method on held-out pairs (x_i, x_j)."""
    to_j, to_i = method.translate(x_i, "i"), method.translate(x_j, "j")
    scores: dict[str, float | int | None] = dict.fromkeys(COLUMNS)
    scores.update(
        translation_fvu_ij=translation_fvu(x_j, to_j),
        translation_fvu_ji=translation_fvu(x_i, to_i),
        cosine_ij=mean_cosine(x_j, to_j),
        cosine_ji=mean_cosine(x_i, to_i),
        r1_ij=recall_at_1(to_j, x_j),
        r1_ji=recall_at_1(to_i, x_i),
        cycle_fvu_i=cycle_fvu(x_i, method.translate(to_j, "j")),
        cycle_fvu_j=cycle_fvu(x_j, method.translate(to_i, "i")),
        seconds=method.seconds,
    )
    if method.reconstruct is not None:
        recon_i, recon_j = method.reconstruct(x_i, x_j)
        scores.update(fvu_i=extraction_fvu(x_i, recon_i), fvu_j=extraction_fvu(x_j, recon_j))
    if method.encode is not None:
        codes_i, codes_j = method.encode(x_i, "i"), method.encode(x_j, "j")
        scores.update(concept_consistency(codes_i, codes_j))
        if shared_factors is not None:
            scores["recovery"] = shared_factor_recovery(codes_i, codes_j, shared_factors)
    # NaN (no live concept, only empty active sets) becomes None: undefined, and valid JSON
    return {
        name: None if isinstance(value, float) and math.isnan(value) else value
        for name, value in scores.items()
    }


# --- the driver --------------------------------------------------------------------------------


@dataclass
class SplitData:
    """The arrays of one split: training rows (the paired ones first) and held-out pairs."""

    split: PairSplit
    train_i: np.ndarray
    train_j: np.ndarray
    val_i: np.ndarray
    val_j: np.ndarray
    test_i: np.ndarray
    test_j: np.ndarray
    test_factors: np.ndarray | None

    @classmethod
    def of(cls, pair: EmbeddingPair, split: PairSplit) -> SplitData:
        factors = pair.shared_factors
        return cls(
            split,
            pair.x_i[split.train], pair.x_j[split.train],
            pair.x_i[split.val], pair.x_j[split.val],
            pair.x_i[split.test], pair.x_j[split.test],
            None if factors is None else factors[split.test],
        )  # fmt: skip

    def pairs(self, fraction: float) -> np.ndarray:
        """[P, 2] indices into the training rows: the first P rows are the paired ones."""
        return np.repeat(np.arange(self.split.pair_count(fraction))[:, None], 2, axis=1)


def fit_method(
    name: str,
    data: SplitData,
    fraction: float,
    config: CosaeConfig,
    uncoupled: Callable[[], CoupledResult],
    work_dir: Path | None = None,
    device: str = "cpu",
    progress: bool = False,
) -> CoupledMethod:
    """Fit method `name` on the training rows with the pairs of `fraction`."""
    pairs = data.pairs(fraction)
    pair_i, pair_j = data.train_i[: len(pairs)], data.train_j[: len(pairs)]
    reference = (data.train_i, data.train_j)
    mean_i, mean_j = data.train_i.mean(axis=0), data.train_j.mean(axis=0)
    checkpoints = work_dir / f"{name}-{fraction:g}" if work_dir else None
    if name == "cosae":
        run_config = config.model_copy(update={"paired_fraction": fraction})
        fitted = train_coupled(
            data.train_i, data.train_j, pairs, run_config, val=(data.val_i, data.val_j),
            work_dir=checkpoints, device=device, progress=progress,
        )  # fmt: skip
        return coupled_sae_method(name, fitted.model.cpu(), fitted.seconds)
    if name in ("procrustes", "least-squares"):
        fit = orthogonal_procrustes if name == "procrustes" else least_squares_map
        return linear_method(name, fit(pair_i, pair_j, mean_i, mean_j), None)
    if name == "crosscoder":
        crosscoder = train_crosscoder(pair_i, pair_j, config, reference, device)
        return crosscoder_method(name, crosscoder.model.cpu(), crosscoder.seconds)
    if name == "universal-sae":
        usae = train_universal_sae(pair_i, pair_j, config, reference, device, checkpoints)
        return coupled_sae_method(name, usae.model.cpu(), usae.seconds)
    if name in ("uncoupled", "uncoupled-matched"):
        independent = uncoupled()
        model = independent.model.cpu()
        if name == "uncoupled":
            return coupled_sae_method(name, model, independent.seconds)
        order = match_concepts(encode_rows(model, pair_i, "i"), encode_rows(model, pair_j, "j"))
        return coupled_sae_method(name, with_domain_j_reordered(model, order), independent.seconds)
    raise ValueError(f"unknown method {name!r}; expected one of {METHODS}")


def evaluate_pair(
    pair: EmbeddingPair,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    config: CosaeConfig | None = None,
    methods: Sequence[str] = METHODS,
    work_dir: Path | None = None,
    device: str = "cpu",
    progress: bool = False,
) -> dict[str, Any]:
    """Fit and score every method at every fraction on one split; return the report.

    Report: the pair, split sizes, config, fractions, methods, and `results`, one row per
    (fraction, method) with `pairs` (how many were known) and every metric (None where a
    method has no such quantity). With `work_dir`, finished rows are kept there and reused.
    """
    config = config or CosaeConfig()
    fractions = sorted({checked_fraction(f) for f in fractions})
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; expected some of {METHODS}")
    split = split_pair(pair, seed=config.seed)
    data = SplitData.of(pair, split)
    data_key = _data_key(pair, split)
    trained: dict[str, CoupledResult] = {}

    def uncoupled() -> CoupledResult:
        if "model" not in trained:
            trained["model"] = train_uncoupled(
                data.train_i, data.train_j, config, device,
                work_dir / "uncoupled" if work_dir else None,
            )  # fmt: skip
        return trained["model"]

    results = []
    for fraction in fractions:
        for name in methods:
            key = _result_key(config, data_key, name, fraction)
            path = work_dir / "results" / f"{name}-{fraction:g}.json" if work_dir else None
            row = _saved_result(path, key)
            if row is None:
                log.info("fitting %s with %d pairs", name, split.pair_count(fraction))
                method = fit_method(
                    name, data, fraction, config, uncoupled, work_dir, device, progress
                )
                scores = score_method(method, data.test_i, data.test_j, data.test_factors)
                row = {"fraction": fraction, "pairs": split.pair_count(fraction), "method": name,
                       **scores}  # fmt: skip
                if path is not None:
                    payload = {"format": RESULT_FORMAT, "key": key, "row": row}
                    atomic_write_bytes(path, (json.dumps(payload, indent=2) + "\n").encode())
            results.append(row)
    return {
        "pair": pair.describe(),
        "split": {"train": len(split.train), "val": len(split.val), "test": len(split.test)},
        "config": config.model_dump(),
        "fractions": fractions,
        "methods": list(methods),
        "results": results,
    }


def _data_key(pair: EmbeddingPair, split: PairSplit) -> str:
    digest = hashlib.sha256()
    for array in (pair.x_i, pair.x_j, split.train, split.val, split.test):
        digest.update(np.ascontiguousarray(array).tobytes())
    if pair.shared_factors is not None:
        digest.update(np.ascontiguousarray(pair.shared_factors).tobytes())
    return digest.hexdigest()


def _result_key(config: CosaeConfig, data_key: str, method: str, fraction: float) -> str:
    text = f"{config.model_dump_json()}|{data_key}|{method}|{fraction!r}"
    return hashlib.sha256(text.encode()).hexdigest()


def _saved_result(path: Path | None, key: str) -> dict[str, Any] | None:
    if path is None or not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return saved["row"] if saved.get("key") == key else None


# --- the report --------------------------------------------------------------------------------


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
    """One PNG: each plotted metric against the paired fraction (log scale), a line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    panels = [(m, t) for m, t in PLOTTED if any(r.get(m) is not None for r in report["results"])]
    palette = plt.get_cmap("tab10")
    colours = {method: palette(n % 10) for n, method in enumerate(report["methods"])}
    columns = 3
    rows = max(1, math.ceil(len(panels) / columns))
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    for axis, (metric, title) in zip(axes.flat, panels, strict=False):
        for method in report["methods"]:
            points = [
                (r["fraction"], r[metric])
                for r in report["results"]
                if r["method"] == method and r.get(metric) is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                axis.plot(xs, ys, marker="o", color=colours[method], label=method)
        axis.set_xscale("log")
        if "fvu" in metric:
            axis.set_yscale("log")  # a least-squares map with fewer pairs than dims explodes
        axis.set_xlabel("paired fraction")
        axis.set_title(title, fontsize=9)
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(panels) :]:
        axis.axis("off")
    handles = [Line2D([], [], color=c, marker="o", label=m) for m, c in colours.items()]
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8)
    figure.suptitle(f"CoSAE and baselines on {report['pair']['name']}", fontsize=10)
    figure.tight_layout(rect=(0, 0.08, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
