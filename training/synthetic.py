"""Synthetic inputs for exercising and sizing the pipeline without data: clustered and
spectrum rows, a clustered or tiled embedding cache, random GraSP-VL and CEDAR artifacts.

The gallery: C unit centres; row i = normalise(centre[c_i] + σ·g_i / √D) with g_i Gaussian, so
neighbours are meaningful (rows of a cluster are closer to each other than to the rest) and
approximate indexes have real structure to exploit. Written shard by shard with the cache's own
writer, so a gallery of any size is generated with one shard in RAM.

`write_tiled_cache` grows a real cache instead: every row a real row drawn at random, plus
Gaussian noise of `noise`/√D, renormalised, so that what reads the rows (a vocabulary
readout's word postings) finds them as dense as on the real gallery.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from training.cedar.catalog import build_catalog, catalog_json, name_concepts
from training.core.artifacts import TransformArtifact
from training.core.cache import CacheManifest, write_manifest, write_shard
from training.core.granularity import default_contract
from training.core.rotations import random_rotation


def cluster_centres(clusters: int, dim: int, seed: int) -> np.ndarray:
    centres = np.random.default_rng([seed, 1]).normal(size=(clusters, dim))
    return (centres / np.linalg.norm(centres, axis=1, keepdims=True)).astype(np.float32)


def clustered_rows(
    centres: np.ndarray, n: int, seed: int, spread: float = 0.6
) -> tuple[np.ndarray, np.ndarray]:
    """(unit rows float32 [n, D], cluster of each row)."""
    rng = np.random.default_rng(seed)
    dim = centres.shape[1]
    labels = rng.integers(0, len(centres), n)
    x = centres[labels] + spread * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def write_synthetic_cache(
    root: Path,
    rows: int,
    dim: int,
    shard_rows: int = 50_000,
    dtype: str = "float16",
    clusters: int = 64,
    seed: int = 0,
    modality: str = "image",
    spread: float = 0.6,
    encoder: str = "synthetic",
) -> Path:
    """A complete embedding cache of `rows` clustered rows (ids `row-{i}`), shard by shard.
    `encoder`: the encoder its manifest names (a bundle of it embeds queries with that one)."""
    centres = cluster_centres(clusters, dim, seed)
    manifest = CacheManifest(encoder=encoder, dim=dim, dtype=dtype, modalities=[modality])
    for index, start in enumerate(range(0, rows, shard_rows)):
        n = min(shard_rows, rows - start)
        x, labels = clustered_rows(centres, n, seed=seed * 100_003 + index, spread=spread)
        metadata = pa.table(
            {
                "id": [f"row-{i}" for i in range(start, start + n)],
                "caption": [f"cluster {c}" for c in labels],
            }
        )
        manifest.shards.append(write_shard(root, index, {modality: x}, metadata, dtype))
    manifest.complete = True
    write_manifest(root, manifest)
    return root


def write_tiled_cache(
    source: np.ndarray,
    root: Path,
    rows: int,
    encoder: str,
    noise: float = 0.05,
    shard_rows: int = 50_000,
    seed: int = 0,
    modality: str = "text",
) -> Path:
    """A complete cache of `rows` rows (ids `tile-{i}`) drawn from `source` with noise (module
    doc), shard by shard; float16 like the caches `strata embed` writes."""
    source = np.asarray(source, dtype=np.float32)
    dim = source.shape[1]
    manifest = CacheManifest(encoder=encoder, dim=dim, dtype="float16", modalities=[modality])
    for index, start in enumerate(range(0, rows, shard_rows)):
        rng = np.random.default_rng([seed, index])
        n = min(shard_rows, rows - start)
        picked = rng.integers(0, len(source), n)
        x = source[picked] + noise * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        ids = [f"tile-{i}" for i in range(start, start + n)]
        metadata = pa.table({"id": ids, "caption": [f"copy of row {r}" for r in picked]})
        manifest.shards.append(write_shard(root, index, {modality: x}, metadata, "float16"))
    manifest.complete = True
    write_manifest(root, manifest)
    return root


def random_grasp_artifact(dim: int, seed: int = 0) -> TransformArtifact:
    """A GraSP-VL artifact with a Haar-random rotation and a small mean (the default contract)."""
    mean = np.random.default_rng([seed, 2]).normal(scale=0.01, size=dim)
    return TransformArtifact("grasp-vl", random_rotation(dim, seed), mean, default_contract(dim))


def random_cedar_artifact(
    dim: int,
    k: int = 8,
    sample: np.ndarray | None = None,
    seed: int = 1,
    encoder: str | None = None,
    words: int = 64,
) -> TransformArtifact:
    """A CEDAR artifact: a random rotation, the mean of `sample`, and a catalog named from a
    random vocabulary (`word-0`, ...) with frequencies and examples measured on `sample` (64
    Gaussian unit rows when None). `encoder`: the encoder its manifest names."""
    if sample is None:
        sample = np.random.default_rng([seed, 4]).normal(size=(64, dim))
        sample /= np.linalg.norm(sample, axis=1, keepdims=True)
    rotation = random_rotation(dim, seed)
    mean = np.asarray(sample, dtype=np.float64).mean(axis=0)
    vocabulary = [f"word-{i}" for i in range(words)]
    embeddings = np.random.default_rng([seed, 3]).normal(size=(words, dim))
    names = name_concepts(rotation, mean, vocabulary, embeddings)
    catalog = build_catalog(
        names, rotation, mean, k, sample, [f"sample-{i}" for i in range(len(sample))]
    )
    return TransformArtifact(
        method="cedar",
        rotation=rotation,
        mean=mean,
        contract=default_contract(dim),
        encoder=encoder,
        extra={"k": k, "catalog": catalog_json(catalog)},
    )


def spectrum_rows(n: int, dim: int, alpha: float, seed: int, block: int = 65_536) -> np.ndarray:
    """n unit rows [n, dim] float32 of a Gaussian with variance λ_j ∝ j^−α, j = 1 … dim."""
    std = (np.arange(1, dim + 1, dtype=np.float64) ** (-alpha / 2)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, block):
        part = rng.standard_normal((min(block, n - start), dim), dtype=np.float32) * std
        out[start : start + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return out
