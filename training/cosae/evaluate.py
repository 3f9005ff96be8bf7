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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.core.files import atomic_write_bytes
from training.cosae.baselines import (
    least_squares_map,
    match_concepts,
    orthogonal_procrustes,
    train_uncoupled,
    train_universal_sae,
    with_domain_j_reordered,
)
from training.cosae.config import CosaeConfig
from training.cosae.crosscoder import train_crosscoder
from training.cosae.methods import (
    CoupledMethod,
    coupled_sae_method,
    crosscoder_method,
    linear_method,
    score_method,
)
from training.cosae.model import encode_rows
from training.cosae.pairs import EmbeddingPair, PairSplit, checked_fraction, split_pair
from training.cosae.train import CoupledResult, train_coupled

log = logging.getLogger(__name__)

METHODS = (
    "cosae",
    "procrustes",
    "least-squares",
    "crosscoder",
    "universal-sae",
    "uncoupled-matched",
    "uncoupled",
)
DEFAULT_FRACTIONS = (0.001, 0.01, 0.1, 1.0)
RESULT_FORMAT = "strata.cosae-result/1"


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
            pair.x_i[split.train],
            pair.x_j[split.train],
            pair.x_i[split.val],
            pair.x_j[split.val],
            pair.x_i[split.test],
            pair.x_j[split.test],
            None if factors is None else factors[split.test],
        )

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
            data.train_i,
            data.train_j,
            pairs,
            run_config,
            val=(data.val_i, data.val_j),
            work_dir=checkpoints,
            device=device,
            progress=progress,
        )
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
                data.train_i,
                data.train_j,
                config,
                device,
                work_dir / "uncoupled" if work_dir else None,
            )
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
                row = {
                    "fraction": fraction,
                    "pairs": split.pair_count(fraction),
                    "method": name,
                    **scores,
                }
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
