"""Model upgrades without re-embedding the gallery: a query translator from model B to model A.

A gallery indexed with model A (the old model) keeps its index; queries embedded by model B (the
new one) are translated into A's space and searched there, so re-embedding the gallery can wait
or never happen. The translator is fitted on a paired sample (items embedded by both models,
usually a small share of the gallery) and, for CoSAE, on every unpaired row of each model too:

- **cosae**: the coupled SAE with B as domain i and A as domain j; a query is D_A(E_B(x_B)).
- **procrustes** / **least-squares**: x_A ≈ (x_B − μ_B) W + μ_A fitted on the pairs
  (`training.cosae.baselines`), the baselines of backward-compatible retrieval.

Every translated query is L2-normalised, as the service's queries are.

The artifact is a folder, written atomically (`training.core.artifacts.write_folder`):
`manifest.json` (`format`, `method`, `source_encoder` = B, `target_encoder` = A, the dims, how
many pairs and unpaired rows it saw, its held-out scores) and `weights.safetensors` (the coupled
model's state, or `mean_source`, `mean_target`, `matrix`).

The upgrade table (`upgrade_table`) measures it the way backward-compatibility work does: on
held-out items, A-queries against the A gallery, B/B, and translated-B against A (R@1, mAP).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file
from safetensors.numpy import save as save_numpy
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from training.core.artifacts import write_folder
from training.core.errors import InputError
from training.core.metrics import unit_rows
from training.cosae.baselines import least_squares_map, orthogonal_procrustes
from training.cosae.config import CosaeConfig
from training.cosae.metrics import grouped_retrieval, mean_cosine, recall_at_1
from training.cosae.model import CoupledSae, translate_rows
from training.cosae.train import train_coupled

log = logging.getLogger(__name__)

TRANSLATOR_FORMAT = "strata.query-translator/1"
TRANSLATOR_METHODS = ("cosae", "procrustes", "least-squares")
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
HELD_OUT = 1000  # shared ids kept out of the pairs to score the translator on


@dataclass
class QueryTranslator:
    """Maps unit query embeddings of model B (source) to unit vectors in model A's space."""

    method: str
    source_encoder: str
    target_encoder: str
    source_dim: int
    target_dim: int
    model: CoupledSae | None = None  # cosae
    linear: dict[str, np.ndarray] = field(default_factory=dict)  # mean_source, mean_target, matrix
    info: dict[str, Any] = field(default_factory=dict)  # pairs, rows, held-out scores

    @property
    def fingerprint(self) -> str:
        """sha256 of the method, encoders and weights: names this translator in cache keys."""
        names = f"{self.method}|{self.source_encoder}|{self.target_encoder}"
        digest = hashlib.sha256(names.encode())
        if self.model is not None:
            for name, value in sorted(self.model.state_dict().items()):
                digest.update(name.encode())
                digest.update(value.detach().cpu().numpy().tobytes())
        for name, value in sorted(self.linear.items()):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        return digest.hexdigest()

    def translate(self, x: np.ndarray) -> np.ndarray:
        """[N, source_dim] → [N, target_dim], L2-normalised float32."""
        rows = np.asarray(x, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.source_dim:
            raise InputError(
                f"the translator takes [N, {self.source_dim}] rows of {self.source_encoder}, "
                f"got {rows.shape}"
            )
        if self.model is not None:
            return unit_rows(translate_rows(self.model, rows, "i"))
        out = (rows - self.linear["mean_source"]) @ self.linear["matrix"]
        return unit_rows(out + self.linear["mean_target"])

    def manifest(self) -> dict[str, Any]:
        shape: dict[str, int] = {}
        if self.model is not None:
            shape = {
                "n_concepts": self.model.n_concepts,
                "k_source": self.model.domain_i.k,
                "k_target": self.model.domain_j.k,
            }
        return {
            "format": TRANSLATOR_FORMAT,
            "method": self.method,
            "source_encoder": self.source_encoder,
            "target_encoder": self.target_encoder,
            "source_dim": self.source_dim,
            "target_dim": self.target_dim,
            **shape,
            **self.info,
        }

    def save(self, path: Path, overwrite: bool = False) -> Path:
        """Write the folder atomically (`training.core.artifacts.write_folder`)."""
        if self.model is not None:
            state = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
            weights = save_safetensors(state)
        else:
            weights = save_numpy({k: np.ascontiguousarray(v) for k, v in self.linear.items()})
        manifest = (json.dumps(self.manifest(), indent=2) + "\n").encode()
        return write_folder(Path(path), {WEIGHTS: weights, MANIFEST: manifest}, overwrite)

    @classmethod
    def load(cls, path: str | Path) -> QueryTranslator:
        """The translator saved at `path`; InputError naming what is wrong when it is not one."""
        path = Path(path).expanduser()
        if not (path / MANIFEST).is_file() or not (path / WEIGHTS).is_file():
            raise InputError(f"not a query translator ({MANIFEST}, {WEIGHTS}): {path}")
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{path / MANIFEST} is not valid JSON: {exc}") from exc
        if manifest.get("format") != TRANSLATOR_FORMAT:
            raise InputError(f"{path}: unsupported translator format {manifest.get('format')!r}")
        method = manifest["method"]
        if method not in TRANSLATOR_METHODS:
            raise InputError(f"{path}: unknown translator method {method!r}")
        keys = (
            "format",
            "method",
            "source_encoder",
            "target_encoder",
            "source_dim",
            "target_dim",
            "n_concepts",
            "k_source",
            "k_target",
        )
        info = {k: v for k, v in manifest.items() if k not in keys}
        common = {
            "method": method,
            "source_encoder": manifest["source_encoder"],
            "target_encoder": manifest["target_encoder"],
            "source_dim": int(manifest["source_dim"]),
            "target_dim": int(manifest["target_dim"]),
            "info": info,
        }
        if method == "cosae":
            model = CoupledSae(
                common["source_dim"],
                common["target_dim"],
                manifest["n_concepts"],
                manifest["k_source"],
                manifest["k_target"],
            )
            model.load_state_dict(load_safetensors((path / WEIGHTS).read_bytes()))
            model.eval()
            return cls(model=model, **common)
        linear = load_file(str(path / WEIGHTS))
        expected = {
            "mean_source": (common["source_dim"],),
            "mean_target": (common["target_dim"],),
            "matrix": (common["source_dim"], common["target_dim"]),
        }
        for name, shape in expected.items():
            if name not in linear or linear[name].shape != shape:
                raise InputError(f"{path}: weights lack {name} of shape {shape}")
        return cls(linear=linear, **common)


def fit_translator(
    source: np.ndarray,
    target: np.ndarray,
    paired: int,
    method: str,
    source_encoder: str,
    target_encoder: str,
    config: CosaeConfig | None = None,
    work_dir: Path | None = None,
    device: str = "cpu",
    progress: bool = False,
) -> QueryTranslator:
    """A translator B → A from rows of each model, the first `paired` of each being pairs.

    `source` [N_B, D_B] and `target` [N_A, D_A]: row n < `paired` of both is the same item; the
    other rows need not correspond (CoSAE uses them for its unpaired terms; the linear maps
    ignore them except for the means).
    """
    if method not in TRANSLATOR_METHODS:
        raise InputError(f"unknown method {method!r}; choose from {', '.join(TRANSLATOR_METHODS)}")
    if not 1 <= paired <= min(len(source), len(target)):
        raise InputError(f"{paired} pairs for {len(source)} and {len(target)} rows")
    common = {
        "method": method,
        "source_encoder": source_encoder,
        "target_encoder": target_encoder,
        "source_dim": int(source.shape[1]),
        "target_dim": int(target.shape[1]),
    }
    if method == "cosae":
        config = config or CosaeConfig()
        pairs = np.repeat(np.arange(paired)[:, None], 2, axis=1)
        fitted = train_coupled(
            source, target, pairs, config, work_dir=work_dir, device=device, progress=progress
        )
        return QueryTranslator(model=fitted.model.cpu().eval(), **common)
    fit = orthogonal_procrustes if method == "procrustes" else least_squares_map
    linear = fit(source[:paired], target[:paired], source.mean(axis=0), target.mean(axis=0))
    weights = {
        "mean_source": linear.mean_i.astype(np.float32),
        "mean_target": linear.mean_j.astype(np.float32),
        "matrix": linear.i_to_j.astype(np.float32),
    }
    return QueryTranslator(linear=weights, **common)


@dataclass
class SharedRows:
    """The rows of caches A and B whose item ids they share: the pairs a translator is fitted
    on (`pair_a[i]` of A is `pair_b[i]` of B) and the held-out pairs it is scored on."""

    shared: int  # ids the two caches share
    pair_a: np.ndarray
    pair_b: np.ndarray
    held_a: np.ndarray
    held_b: np.ndarray

    def paired_first(self, x_a: np.ndarray, x_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(target, source): each cache's rows with its paired rows first, in pair order, then
        its other rows (the unpaired data CoSAE also trains on)."""
        target = np.concatenate([x_a[self.pair_a], np.delete(x_a, self.pair_a, axis=0)])
        source = np.concatenate([x_b[self.pair_b], np.delete(x_b, self.pair_b, axis=0)])
        return target, source


def shared_rows(
    ids_a: np.ndarray, ids_b: np.ndarray, fraction: float, seed: int, held_out: int = HELD_OUT
) -> SharedRows | None:
    """Pair ⌈fraction · |A|⌉ shared ids (at least one), drawn in a seeded order, and hold out
    the last min(held_out, shared / 5) of that order for scoring (never paired); None when the
    caches share no id. Pairs are capped by the shared ids left after the held-out ones."""
    _, rows_a, rows_b = np.intersect1d(
        ids_a.astype(str), ids_b.astype(str), assume_unique=True, return_indices=True
    )
    if not len(rows_a):
        return None
    order = np.random.default_rng(seed).permutation(len(rows_a))
    wanted = max(1, int(np.ceil(fraction * len(ids_a) - 1e-9)))
    held = min(held_out, len(rows_a) // 5)
    paired = min(wanted, len(rows_a) - held)
    return SharedRows(
        shared=len(rows_a),
        pair_a=rows_a[order[:paired]],
        pair_b=rows_b[order[:paired]],
        held_a=rows_a[order[len(order) - held :]],
        held_b=rows_b[order[len(order) - held :]],
    )


def held_out_scores(
    translator: QueryTranslator, source: np.ndarray, target: np.ndarray
) -> dict[str, float]:
    """Cosine of translated against true target rows, and R@1 among them, on held-out pairs."""
    translated = translator.translate(source)
    return {
        "cosine": mean_cosine(target, translated),
        "r1": recall_at_1(translated, target),
        "pairs": len(source),
    }


def upgrade_table(
    source: np.ndarray,
    target: np.ndarray,
    groups: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    fractions: Sequence[float],
    methods: Sequence[str],
    names: tuple[str, str],
    config: CosaeConfig | None = None,
    work_dir: Path | None = None,
    device: str = "cpu",
    progress: bool = False,
) -> dict[str, Any]:
    """A/A, B/B and translated-B/A R@1 and mAP on the test items, per fraction and method.

    `source` (B) and `target` (A) are row-aligned embeddings of the same items, `groups` their
    group (an image: relevant = the other items of the group). `train` lists the training rows
    in the order whose first ⌈ρ·N⌉ are the pairs at fraction ρ; every training row of both
    models is also given unpaired. The test rows are queries and gallery at once.
    """
    name_b, name_a = names
    test_groups = np.asarray(groups)[test]
    rows = [
        {
            "setting": f"A/A ({name_a} queries, {name_a} gallery)",
            "method": None,
            "fraction": None,
            "pairs": None,
            **grouped_retrieval(target[test], target[test], test_groups),
        },
        {
            "setting": f"B/B ({name_b} queries, {name_b} gallery)",
            "method": None,
            "fraction": None,
            "pairs": None,
            **grouped_retrieval(source[test], source[test], test_groups),
        },
    ]
    for fraction in sorted(fractions):
        paired = max(1, int(np.ceil(fraction * len(train) - 1e-9)))
        for method in methods:
            log.info("upgrade table: %s with %d pairs", method, paired)
            translator = fit_translator(
                source[train],
                target[train],
                paired,
                method,
                name_b,
                name_a,
                config,
                work_dir / f"{method}-{fraction:g}" if work_dir else None,
                device,
                progress,
            )
            translated = translator.translate(source[test])
            rows.append(
                {
                    "setting": "translated B/A",
                    "method": method,
                    "fraction": fraction,
                    "pairs": paired,
                    **grouped_retrieval(translated, target[test], test_groups),
                }
            )
    return {
        "source": name_b,
        "target": name_a,
        "train": len(train),
        "test": len(test),
        "test_groups": len(np.unique(test_groups)),
        "rows": rows,
    }


def upgrade_markdown(table: dict[str, Any]) -> str:
    """The upgrade table as markdown, one row per setting."""
    lines = [
        f"# Model upgrade: B = {table['source']} (new) answered from A = {table['target']} (old)",
        "",
        f"{table['test']} test items of {table['test_groups']} groups: each item is a query, "
        "relevant = the other items of its group; translators fitted on "
        f"{table['train']} training rows of which the first `pairs` are paired.",
        "",
        "| setting | method | paired fraction | pairs | R@1 | mAP |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in table["rows"]:
        fraction = "–" if row["fraction"] is None else f"{row['fraction']:g}"
        pairs = "–" if row["pairs"] is None else str(row["pairs"])
        lines.append(
            f"| {row['setting']} | {row['method'] or '–'} | {fraction} | {pairs} | "
            f"{row['r1']:.3f} | {row['map']:.3f} |"
        )
    return "\n".join(lines) + "\n"
