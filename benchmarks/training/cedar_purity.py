"""What limits a rotation's concept purity on the compositional corpus.

For each rotation + top-k method (identity, PCA, random, CEDAR artifacts, ICA, and an oracle
fitted to the ground-truth factors), on the test split:

- FVU at K = 8 / 16 / 32 (training.core.metrics, as `strata eval cedar`);
- purity at k = 32 with the project's names (cosine of each signed axis with the centred
  vocabulary embeddings, `name_directions`) — the figure `strata eval cedar` reports;
- purity with names chosen by data: each signed axis takes the factor word it predicts best
  (highest F1 of "axis active" for "factor present") on the VALIDATION rows, and is scored on
  the test rows. The gap between the two is what naming by cosine loses; what is left below
  1.0 with data names is what the rotation itself cannot give.

The oracle is the best an orthogonal basis does when it is told the factors: its first F rows
are the orthonormal rows nearest (orthogonal Procrustes, the polar factor) to the F
factor-discriminant directions fitted on the training rows — the least-squares "encoder" V of
Y ≈ (X − b)V, Y the standardised factor indicators — and the other rows are the principal axes
of what those rows leave. ICA: FastICA's unmixing rows made orthonormal the same way (polar
factor), an unsupervised route to the same kind of basis.

    python -m benchmarks.training.cedar_purity --cache runs/comp20k-minilm \
        --artifact cedar=runs/cedar-comp20k
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.harness import benchmark_parser, publish
from training.cedar.catalog import name_directions
from training.cedar.data import load_split_rows
from training.cedar.evaluate import (
    FACTOR_COLUMNS,
    PURITY_RECALL,
    concept_purity,
    factor_rows,
    rotation_method,
)
from training.cedar.fit import vocabulary_embeddings
from training.cedar.train import CedarConfig, train_cedar
from training.core.artifacts import TransformArtifact
from training.core.metrics import fraction_of_variance_unexplained
from training.core.rotations import (
    ica_rotation,
    pca_rotation,
    polar_rows,
    random_rotation,
    reorthogonalise,
)

FVU_KS = (8, 16, 32)
PURITY_K = 32


def completed_basis(rows: np.ndarray, centred: np.ndarray) -> np.ndarray:
    """A D×D rotation: `rows` (orthonormal) first, then the principal axes of the rows of
    `centred` projected off them."""
    residual = centred - (centred @ rows.T) @ rows
    rest = pca_rotation(residual)[: centred.shape[1] - len(rows)]
    return reorthogonalise(np.concatenate([rows, rest]))


def oracle_rotation(centred: np.ndarray, factors: dict[str, np.ndarray]) -> np.ndarray:
    """The factor-discriminant directions made orthonormal (Procrustes), then the rest."""
    words = sorted(factors)
    y = np.stack([factors[w] for w in words], axis=1).astype(np.float64)
    y = (y - y.mean(axis=0)) / y.std(axis=0)
    v, *_ = np.linalg.lstsq(centred, y, rcond=None)  # [D, F]
    return completed_basis(polar_rows((v / np.linalg.norm(v, axis=0)).T), centred)


def factor_span_fvu(x: np.ndarray, rows: np.ndarray, mean: np.ndarray) -> float:
    """FVU of rows projected (densely) onto the span of the orthonormal `rows`: what every
    factor axis together leaves unexplained, whatever the K."""
    centred = np.asarray(x, dtype=np.float64) - mean
    return fraction_of_variance_unexplained(x, (centred @ rows.T) @ rows + mean)


def role_factor_rows(metadata: pa.Table) -> dict[str, np.ndarray]:
    """(column, value) → mask: each factor in each of its roles ('dog' as subject and as
    object are two), 102 on the compositional set against the 70 factor words."""
    masks = {}
    for column in FACTOR_COLUMNS:
        if column in metadata.column_names:
            values = np.array(metadata.column(column).to_pylist(), dtype=object)
            masks.update({f"{column}={v}": values == v for v in set(values.tolist())})
    return masks


def data_names(active: np.ndarray, n_concepts: int, factors: dict[str, np.ndarray]) -> list[str]:
    """Each concept's name by data: the factor word with the highest F1 of "concept active"
    for "factor present" (recall ≥ PURITY_RECALL), or "" when none."""
    words = sorted(factors)
    fires = np.zeros((active.shape[0], n_concepts), dtype=bool)
    np.put_along_axis(fires, active, True, axis=1)
    y = np.stack([factors[w] for w in words], axis=1)
    hits = fires.T.astype(np.float64) @ y.astype(np.float64)  # [C, F]
    on = fires.sum(axis=0)[:, None]
    present = y.sum(axis=0)[None, :]
    precision = hits / np.maximum(on, 1)
    recall = hits / np.maximum(present, 1)
    f1 = np.where(hits > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0)
    f1 = np.where(recall >= PURITY_RECALL, f1, 0)
    best = f1.argmax(axis=1)
    return [words[b] if f1[c, b] > 0 else "" for c, b in enumerate(best)]


def score(
    method_rotation: np.ndarray,
    mean: np.ndarray,
    x_val: np.ndarray,
    x_test: np.ndarray,
    val_factors: dict[str, np.ndarray],
    test_factors: dict[str, np.ndarray],
    vocab: tuple[list[str], np.ndarray],
) -> dict[str, Any]:
    method = rotation_method("m", method_rotation, mean)
    fvu = {
        k: round(fraction_of_variance_unexplained(x_test, method.reconstruct(x_test, k)), 4)
        for k in FVU_KS
    }
    words, embeddings = vocab
    cosine = [c.name for c in name_directions(method.directions, mean, words, embeddings)]
    active_test = method.concepts(x_test, PURITY_K)
    by_cosine = concept_purity(active_test, cosine, test_factors)
    named = data_names(method.concepts(x_val, PURITY_K), len(cosine), val_factors)
    by_data = concept_purity(active_test, named, test_factors)
    agree = sum(a == b for a, b in zip(cosine, named, strict=True) if b)
    return {
        "fvu": fvu,
        "purity_cosine_names": round(by_cosine["share"], 3),
        "purity_data_names": round(by_data["share"], 3),
        "found_cosine": len(by_cosine["found"]),
        "found_data": len(by_data["found"]),
        "missed_data": sorted(set(test_factors) - set(by_data["found"])),
        "data_named_concepts": sum(bool(n) for n in named),
        "cosine_agrees_with_data": agree,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument(
        "--artifact", action="append", default=[], help="NAME=PATH of a CEDAR artifact"
    )
    parser.add_argument("--no-ica", action="store_true", help="skip the ICA rotation")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/cedar_purity.json"))
    args = parser.parse_args(argv)

    data = load_split_rows(args.cache)
    x = data.embeddings
    train, val, test = data.rows("train"), data.rows("val"), data.rows("test")
    mean = x[train].mean(axis=0)
    centred = (x[train] - mean).astype(np.float64)
    splits = {"train": train, "val": val, "test": test}
    factors = {name: factor_rows(data.metadata.take(rows)) for name, rows in splits.items()}
    words, embeddings, _ = vocabulary_embeddings(data, train, None, None)
    dim = x.shape[1]
    rotations: dict[str, np.ndarray] = {
        "identity": np.eye(dim),
        "pca": pca_rotation(centred),
        "random": random_rotation(dim),
    }
    for spec in args.artifact:
        name, _, path = spec.partition("=")
        rotations[name] = TransformArtifact.load(Path(path)).rotation
    if not args.no_ica:
        rotations["ica"] = ica_rotation(centred)
    oracle = oracle_rotation(centred, factors["train"])
    roles = oracle_rotation(centred, role_factor_rows(data.metadata.take(train)))
    n_factors, n_roles = len(factors["train"]), len(role_factor_rows(data.metadata.take(train)))
    rotations["oracle"] = oracle
    rotations["oracle-roles"] = roles
    config = CedarConfig()
    for name, start, fixed in (
        ("oracle→cedar", oracle, 0),
        ("oracle pinned+cedar", oracle, n_factors),
        ("oracle-roles pinned+cedar", roles, n_roles),
    ):
        rotations[name] = train_cedar(
            x[train], x[val], config, progress=False, initial=start, fixed_rows=fixed
        ).rotation
    span = {
        name: round(factor_span_fvu(x[test], rotation[:n], mean), 4)
        for name, rotation, n in (("factors", oracle, n_factors), ("roles", roles, n_roles))
    }
    methods = {}
    for name, rotation in rotations.items():
        methods[name] = score(
            rotation, mean, x[val], x[test], factors["val"], factors["test"], (words, embeddings)
        )
        print(
            name,
            methods[name]["fvu"],
            methods[name]["purity_cosine_names"],
            methods[name]["purity_data_names"],
            flush=True,
        )
    result = {
        "benchmark": "cedar_purity",
        "cache": str(args.cache),
        "test_rows": len(test),
        "factors": len(factors["test"]),
        "purity_k": PURITY_K,
        "fvu_of_the_factor_span": span,
        "methods": methods,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
