"""Agreement with people: Flickr8k's expert judgments against a transform's prefix similarity.

`ExpertAnnotations.txt` pairs a query image with captions (mostly of other images), each scored
1-4 by three experts. Text only, the image is represented by the mean embedding of its own
captions (leaving out the judged caption when it is one of them). At each prefix length ℓ:

    Spearman   rank correlation over all pairs between s_ℓ(image, caption) and the mean score
    NDCG@10    per query image, its judged captions ranked by s_ℓ with gains (mean score − 1),
               averaged over images with any positive gain
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.core.errors import InputError
from training.core.metrics import prefix_cosine, unit_rows


@dataclass(frozen=True)
class ExpertJudgments:
    images: list[str]
    captions: list[str]  # caption ids, "<image>#<n>"
    scores: np.ndarray  # mean expert score per pair, 1..4


def read_expert_judgments(path: Path) -> ExpertJudgments:
    images, captions, scores = [], [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split("\t")
        try:
            values = [float(v) for v in cells[2:]]
        except ValueError:
            values = []
        if len(cells) < 3 or not values:
            raise InputError(f"{path.name}:{number}: expected '<image>\\t<caption id>\\t<scores>'")
        images.append(cells[0])
        captions.append(cells[1])
        scores.append(float(np.mean(values)))
    if not images:
        raise InputError(f"{path} holds no judgments")
    return ExpertJudgments(images, captions, np.array(scores))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2
            start = end
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = average_ranks(np.asarray(a, float)), average_ranks(np.asarray(b, float))
    return float(np.corrcoef(ra, rb)[0, 1])


def ndcg_at(scores: np.ndarray, gains: np.ndarray, groups: list[str], k: int = 10) -> float:
    """Mean over groups (with a positive gain) of DCG@k of the score ranking / ideal DCG@k."""
    members: dict[str, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members[group].append(i)
    values = []
    for rows in members.values():
        g = gains[rows]
        if g.max() <= 0:
            continue
        discounts = 1 / np.log2(np.arange(2, min(k, len(rows)) + 2))
        ranked = g[np.argsort(-scores[rows], kind="stable")][:k]
        ideal = np.sort(g)[::-1][:k]
        values.append(float((ranked * discounts).sum() / (ideal * discounts).sum()))
    return float(np.mean(values)) if values else 0.0


def agreement(
    transform: Callable[[np.ndarray], np.ndarray],
    judgments: ExpertJudgments,
    embeddings: np.ndarray,
    ids: list[str],
    groups: list[str],
    lengths: list[int],
) -> dict[str, object]:
    """Spearman and NDCG@10 at each prefix length, over the pairs the cache covers."""
    row_of = {caption_id: row for row, caption_id in enumerate(ids)}
    rows_of_group: dict[str, list[int]] = defaultdict(list)
    for row, group in enumerate(groups):
        rows_of_group[group].append(row)
    image_vectors, caption_vectors, kept = [], [], []
    for i, (image, caption) in enumerate(zip(judgments.images, judgments.captions, strict=True)):
        own = [r for r in rows_of_group.get(image, []) if ids[r] != caption]
        if caption not in row_of or not own:
            continue
        image_vectors.append(embeddings[own].mean(axis=0))
        caption_vectors.append(embeddings[row_of[caption]])
        kept.append(i)
    if not kept:
        raise InputError(
            "no judged pair has both its image's captions and the caption in the cache"
        )
    images = transform(unit_rows(np.array(image_vectors)))
    captions = transform(np.array(caption_vectors))
    scores = judgments.scores[kept]
    query = [judgments.images[i] for i in kept]
    per_prefix = {}
    for length in lengths:
        similarity = prefix_cosine(images, captions, length)
        per_prefix[str(length)] = {
            "spearman": spearman(similarity, scores),
            "ndcg@10": ndcg_at(similarity, scores - 1, query),
        }
    return {"pairs": len(kept), "skipped": len(judgments.images) - len(kept), "prefix": per_prefix}
