"""Reading what gallery fitting and the granularity benchmark need from embedding caches.

- `retrieval_task_of`: a split's rows with queries mined from its captions (Flickr-style caches,
  judged by the other captions of each image) or from the compositional corpus's structured
  columns (one exact caption per scene, judged by its own), the query texts embedded with the
  cache's encoder; kept beside the embedded views so a rerun embeds nothing.
- `gallery_rows`: the vectors a bundle would index (image embeddings where the cache has them).
- `query_bank`: embedded query-like texts for the distillation term.
- `gallery_fit`: the three together, as `GalleryFit`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

import numpy as np

from training.core.cache import EmbeddingCache
from training.core.encoders import Encoder, shared_encoder
from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.core.granularity import Granularity
from training.core.settings import load_settings
from training.grasp.config import GraspConfig
from training.grasp.gallery import MIN_RELEVANT_ROWS, RetrievalTask, retrieval_task, scene_mentions
from training.grasp.objective import GalleryFit
from training.views.mentions import vocabulary_queries

log = logging.getLogger(__name__)

SCENE_COLUMNS = (
    "subject",
    "subject_attribute",
    "relation",
    "object",
    "object_attribute",
    "view_relation",
)
# queries kept for the training task need fewer relevant rows than the benchmark's
TRAINING_MIN_RELEVANT = 3


def _split_rows(cache: EmbeddingCache, split: str) -> np.ndarray:
    """Row indices of `split` ("all": every row); refuses a split the cache lacks."""
    metadata = cache.metadata()
    if split == "all":
        return np.arange(cache.rows)
    if "split" not in metadata.column_names:
        raise InputError(f"{cache.root} has no split column; use --gallery-split all")
    labels = np.array(metadata.column("split").to_pylist())
    rows = np.flatnonzero(labels == split)
    if not len(rows):
        raise InputError(f"{cache.root} has no rows in split {split!r}; have {sorted(set(labels))}")
    return rows


def gallery_rows(cache_dir: Path, split: str = "all") -> np.ndarray:
    """The rows a bundle of this cache indexes: image embeddings where it has them, else text."""
    cache = EmbeddingCache.open(cache_dir)
    modality = "image" if "image" in cache.modalities else "text"
    return np.asarray(cache.embeddings(modality)[_split_rows(cache, split)], dtype=np.float32)


def _model(encoder: Encoder | str) -> Encoder:
    """The encoder, loaded once when given by its spec (only when something must be embedded)."""
    return shared_encoder(encoder, load_settings().device) if isinstance(encoder, str) else encoder


def _cached_path(cache: EmbeddingCache, spec: str, what: str) -> Path:
    key = hashlib.sha256((cache.manifest.to_json() + spec + what).encode()).hexdigest()[:16]
    return load_settings().runs_dir / "grasp-views" / f"{cache.root.name}-{what}-{key}.npz"


def retrieval_task_of(
    cache_dir: Path,
    split: str,
    encoder: Encoder | str,
    min_relevant: int = MIN_RELEVANT_ROWS,
) -> RetrievalTask:
    """The split's RetrievalTask (see module doc), embedded once and kept under the runs dir."""
    cache = EmbeddingCache.open(cache_dir)
    spec = encoder if isinstance(encoder, str) else encoder.id
    path = _cached_path(cache, spec, f"retrieval-{split}-{min_relevant}")
    if path.is_file():
        return RetrievalTask.load(path)
    metadata = cache.metadata()
    columns = set(metadata.column_names)
    rows = _split_rows(cache, split)

    def column(name: str) -> list[str]:
        values = metadata.column(name).to_pylist()
        return [values[i] for i in rows]

    if all(c in columns for c in SCENE_COLUMNS):
        mentions = scene_mentions(*(column(c) for c in SCENE_COLUMNS))
        own_caption = True
    elif {"caption", "group"} <= columns:
        mentions, own_caption = column("caption"), False
    else:
        raise InputError(
            f"{cache_dir}: granularity retrieval needs captions grouped by image "
            "(metadata columns caption and group) or the compositional corpus's scene columns"
        )
    model = _model(encoder)
    task = retrieval_task(
        cache.embeddings("text")[rows],
        mentions,
        column("group"),
        model.encode_text,
        min_relevant,
        own_caption,
    )
    log.info("mined %s queries from %s (%s)", task.counts(), cache_dir, split)
    task.save(path)
    return task


def query_bank(
    encoder: Encoder | str, task: RetrievalTask | None, sources: list[str], seed: int = 0
) -> dict[Granularity, np.ndarray]:
    """Embedded query-like texts per granularity: the lexicon's templates ("vocabulary", drawn
    from `seed`) and the training task's mined query texts ("training")."""
    spec = encoder if isinstance(encoder, str) else encoder.id
    bank: dict[Granularity, list[np.ndarray]] = {}
    if "vocabulary" in sources:
        texts = vocabulary_queries(seed=seed)
        key = hashlib.sha256((spec + json.dumps(texts)).encode()).hexdigest()[:16]
        path = load_settings().runs_dir / "grasp-views" / f"vocabulary-{key}.npz"
        if path.is_file():
            with np.load(path) as saved:
                embedded = {g: saved[g] for g in saved.files}
        else:
            model = _model(encoder)
            embedded = {g: model.encode_text(t) for g, t in texts.items()}
            buffer = io.BytesIO()
            np.savez(buffer, **embedded)
            atomic_write_bytes(path, buffer.getvalue())
        for g, e in embedded.items():
            bank.setdefault(Granularity(g), []).append(e)
    if "training" in sources and task is not None:
        for g, e in task.embedded.items():
            if len(e):
                bank.setdefault(g, []).append(e)
    return {g: np.concatenate(parts).astype(np.float32) for g, parts in bank.items()}


def gallery_fit(
    train_cache: Path,
    gallery_cache: Path,
    gallery_split: str,
    encoder: str,
    config: GraspConfig,
) -> GalleryFit:
    """Everything `train_grasp` needs to fit the gallery of `gallery_cache` (its split)."""
    gallery = gallery_rows(gallery_cache, gallery_split)
    dim = EmbeddingCache.open(train_cache).dim
    if gallery.shape[1] != dim:
        raise InputError(f"the gallery is {gallery.shape[1]}-d but the training cache {dim}-d")
    model = encoder
    needs_task = config.weights.retrieval > 0 or "training" in config.distillation_queries
    task = (
        retrieval_task_of(train_cache, config.train_split, model, TRAINING_MIN_RELEVANT)
        if needs_task
        else None
    )
    validation = retrieval_task_of(train_cache, config.validation_split, model)
    bank = (
        query_bank(model, task, config.distillation_queries, config.seed)
        if config.weights.distillation
        else {}
    )
    return GalleryFit(gallery=gallery, task=task, validation=validation, query_bank=bank)
