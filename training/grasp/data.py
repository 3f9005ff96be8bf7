"""GraSP-VL training data: anchors with their views at each granularity and typed negatives.

Built from an embedding cache whose metadata carries the view and negative texts (the
compositional corpus has them by construction: `view_object`, `view_attribute`,
`view_relation`, `neg_object`, `neg_attribute`, `neg_relation`, `neg_order`, `anchor_text`).
Real captions without view columns (Flickr8k) get theirs from the rule-based extractor of
`training.views`, with hard negatives of seven types; rows lacking any view are left out, and a
row whose caption yields no negative of a type holds NaN in that type's array (the metrics and
losses skip it there; `training.core.metrics.present_rows`). The caption view is the
cache's own text embedding; the other texts are embedded with the cache's encoder. The anchor
is an image embedding when the cache has images, else the `anchor_text` paraphrase, else
(Flickr-style, several captions per image) the mean embedding of all the other captions of the
same group.
"""

from __future__ import annotations

import io
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.core.cache import EmbeddingCache
from training.core.encoders import Encoder
from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.core.granularity import Granularity
from training.core.metrics import NEGATIVE_LEVELS, unit_rows

log = logging.getLogger(__name__)

VIEW_COLUMNS = {
    Granularity.OBJECT: "view_object",
    Granularity.ATTRIBUTE: "view_attribute",
    Granularity.RELATION: "view_relation",
}
NEGATIVE_COLUMNS = {kind: f"neg_{kind}" for kind in NEGATIVE_LEVELS}
# Bumped whenever build_from_cache would build a different set from the same cache (the extractor's
# rules, the negative types, which rows are kept), so that embedded views files saved before are
# not reused. 2: seven negative types, rows kept with every view, missing negatives NaN.
GRASP_SET_VERSION = 2


@dataclass
class GraspSet:
    """Row-aligned arrays: anchors, views per granularity, negatives per type (NaN rows where a
    row has none of that type), split labels."""

    ids: np.ndarray
    split: np.ndarray
    anchors: np.ndarray
    views: dict[Granularity, np.ndarray]
    negatives: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    def select(self, mask: np.ndarray) -> GraspSet:
        return GraspSet(
            ids=self.ids[mask],
            split=self.split[mask],
            anchors=self.anchors[mask],
            views={g: v[mask] for g, v in self.views.items()},
            negatives={k: n[mask] for k, n in self.negatives.items()},
        )

    def of_split(self, *names: str) -> GraspSet:
        subset = self.select(np.isin(self.split, names))
        if not len(subset):
            raise InputError(
                f"no rows in split(s) {', '.join(names)}; have {sorted(set(self.split))}"
            )
        return subset

    def arrays(self) -> dict[str, np.ndarray]:
        """The embeddings by the names the loss code uses: anchors, view_<g>, neg_<type>."""
        named = {"anchors": self.anchors}
        named.update({f"view_{g.value}": v for g, v in self.views.items()})
        named.update({f"neg_{k}": n for k, n in self.negatives.items()})
        return named

    def tensors(self, device: str = "cpu") -> dict[str, Any]:
        """`arrays()` as float32 torch tensors on `device`."""
        import torch

        return {
            k: torch.as_tensor(np.asarray(v, dtype=np.float32), device=device)
            for k, v in self.arrays().items()
        }

    def save(self, path: Path) -> None:
        buffer = io.BytesIO()
        np.savez(buffer, ids=self.ids, split=self.split, **self.arrays())
        atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> GraspSet:
        with np.load(path, allow_pickle=False) as data:
            return cls(
                ids=data["ids"],
                split=data["split"],
                anchors=data["anchors"],
                views={
                    g: data[f"view_{g.value}"] for g in Granularity if f"view_{g.value}" in data
                },
                negatives={k: data[f"neg_{k}"] for k in NEGATIVE_LEVELS if f"neg_{k}" in data},
            )


def build_from_cache(
    cache: EmbeddingCache, encoder: Encoder, seed: int = 0, max_rows: int | None = None
) -> GraspSet:
    """Embed the views and negatives named in the cache's metadata (see module docstring);
    views extracted from captions draw their negatives from `seed`, and with `max_rows` a
    sample of that many of the usable rows, drawn from `seed`, is all that is embedded."""
    if encoder.dim != cache.dim:
        raise InputError(f"encoder {encoder.id} is {encoder.dim}-d but the cache is {cache.dim}-d")
    metadata = cache.metadata()
    columns = set(metadata.column_names)
    captions = cache.embeddings("text")
    if all(c in columns for c in VIEW_COLUMNS.values()):
        kept = [*VIEW_COLUMNS.values(), *(c for c in NEGATIVE_COLUMNS.values() if c in columns)]
        texts = {c: metadata.column(c).to_pylist() for c in kept}
    elif "caption" in columns:
        log.info("no view columns in %s: extracting views from the captions", cache.root)
        texts = extracted_view_texts(metadata.column("caption").to_pylist(), seed)
    else:
        raise InputError(f"{cache.root}: metadata has neither view columns nor captions")
    # rows whose every view exists (real captions do not always have all of them)
    keep = np.array([all(texts[c][i] for c in VIEW_COLUMNS.values()) for i in range(len(captions))])
    if "image" in cache.modalities:
        anchors = cache.embeddings("image")
    elif "anchor_text" in columns:
        anchors = _embed(encoder, metadata.column("anchor_text").to_pylist(), "anchors")
    else:  # before filtering: an image's anchor is the mean of *all* its other captions
        anchors, has_anchor = leave_one_out_means(captions, metadata.column("group").to_pylist())
        keep &= has_anchor
    if not keep.any():
        raise InputError(f"{cache.root}: no row has an anchor and every view")
    log.info("%d of %d rows have an anchor and every view", keep.sum(), len(keep))
    rows = sampled_rows(np.flatnonzero(keep), max_rows, seed)

    def pick(column: str) -> list[str | None]:
        return [texts[column][i] for i in rows]

    views = {g: _embed(encoder, pick(c), g.value) for g, c in VIEW_COLUMNS.items()}
    views[Granularity.CAPTION] = captions[rows]
    negatives = {
        kind: embedded
        for kind, column in NEGATIVE_COLUMNS.items()
        if column in texts
        and (embedded := _embed_present(encoder, pick(column), f"{kind} negatives")) is not None
    }
    if not negatives:
        raise InputError(f"{cache.root}: no kept row has a hard negative of any type")
    split = metadata.column("split").to_pylist() if "split" in columns else ["all"] * len(captions)
    return GraspSet(
        ids=np.array(metadata.column("id").to_pylist())[rows],
        split=np.array(split)[rows],
        anchors=anchors[rows],
        views=views,
        negatives=negatives,
    )


def sampled_rows(rows: np.ndarray, max_rows: int | None, seed: int) -> np.ndarray:
    """`rows`, or `max_rows` of them drawn from `seed` (kept in order) when there are more."""
    if max_rows is None or len(rows) <= max_rows:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, size=max_rows, replace=False))


def extracted_view_texts(captions: list[str], seed: int = 0) -> dict[str, list[str | None]]:
    """View and negative texts of real captions from the rule-based extractor (None where a
    caption has no such view or negative), under the metadata column names of the compositional
    corpus (`neg_<type>` for all seven types)."""
    from training.views.extractor import extract_views
    from training.views.negatives import make_negatives

    rng = random.Random(seed)
    texts: dict[str, list[str | None]] = {
        c: [] for c in (*VIEW_COLUMNS.values(), *NEGATIVE_COLUMNS.values())
    }
    for caption in captions:
        views = extract_views(caption)
        negatives = make_negatives(views, rng)
        for granularity, column in VIEW_COLUMNS.items():
            texts[column].append(getattr(views, granularity.value))
        for kind, column in NEGATIVE_COLUMNS.items():
            texts[column].append(negatives.get(kind))
    return texts


def _embed_present(encoder: Encoder, texts: list[str | None], what: str) -> np.ndarray | None:
    """The embeddings of the texts that exist, NaN rows where a text is missing (None when none
    exists): how a GraspSet marks the rows without a negative of a type."""
    present = [i for i, t in enumerate(texts) if t and t.strip()]
    if not present:
        log.info("no %s", what)
        return None
    log.info("%d of %d rows have %s", len(present), len(texts), what)
    embedded = _embed(encoder, [texts[i] for i in present], what)
    out = np.full((len(texts), embedded.shape[1]), np.nan, dtype=embedded.dtype)
    out[present] = embedded
    return out


def _embed(encoder: Encoder, texts: list[str | None], what: str) -> np.ndarray:
    if any(t is None or not t.strip() for t in texts):
        raise InputError(f"some {what} texts are empty; every row needs one")
    log.info("embedding %d %s with %s", len(texts), what, encoder.id)
    return encoder.encode_text(texts)


def leave_one_out_means(embeddings: np.ndarray, groups: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the normalised mean of the other rows of its group (the text-only stand-in
    for the group's image), and a mask of the rows that have one: a row alone in its group has
    no anchor (its vector is left at zero)."""
    members: dict[str, list[int]] = defaultdict(list)
    for row, group in enumerate(groups):
        members[group].append(row)
    sums = np.zeros_like(embeddings, dtype=np.float64)
    has_anchor = np.zeros(len(groups), dtype=bool)
    for rows in members.values():
        if len(rows) < 2:
            continue
        total = embeddings[rows].astype(np.float64).sum(axis=0)
        sums[rows] = (total - embeddings[rows]) / (len(rows) - 1)
        has_anchor[rows] = True
    return unit_rows(sums), has_anchor
