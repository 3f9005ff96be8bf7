"""Granularity retrieval on a held-out gallery: does a prefix find what its query asks?
(docs/reference/metrics.md#retrieval-by-granularity)

Rows are captions of images with several captions each (Flickr8k: five). Queries are mined from
the gallery's own captions, one kind per granularity:

    object     "a {noun}"                     relevant: >= 2 other captions of the image
                                              mention the noun (plurals folded)
    attribute  "a {adjective} {noun}"         relevant: another caption has the phrase
    relation   "a {subject} {verb} ... {obj}" relevant: another caption has the triple

A row is relevant when its image is, judged from the image's *other* captions only, so a row is
never found for its own words. A query is kept when at least `min_relevant` rows are relevant to
it. Each query is searched at every contract prefix by s_ℓ (cosine of the first ℓ rotated
coordinates) and scored by P@10 and AP@100; "kept" is AP@100 at the query's own prefix over
AP@100 at D. Pure functions on arrays; the command is `strata eval grasp --gallery CACHE`.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.core.files import atomic_write_bytes
from training.core.granularity import Contract, Granularity
from training.core.metrics import prefix_vectors
from training.views.mentions import (
    Mentions,
    attribute_query,
    caption_mentions,
    object_query,
)

Transform = Callable[[np.ndarray], np.ndarray]
QUERY_GRANULARITIES = (Granularity.OBJECT, Granularity.ATTRIBUTE, Granularity.RELATION)
# how many *other* captions of an image must mention the key for the image to be relevant
OTHER_CAPTIONS_NEEDED = {Granularity.OBJECT: 2, Granularity.ATTRIBUTE: 1, Granularity.RELATION: 1}
MIN_RELEVANT_ROWS = 10
TOP_K = 100
PRECISION_AT = 10


@dataclass
class QuerySet:
    """The mined queries of one granularity: texts, keys and the relevance of every row."""

    granularity: Granularity
    texts: list[str]
    keys: list[Hashable]
    relevant: np.ndarray  # bool [queries, rows]

    def __len__(self) -> int:
        return len(self.texts)


def _keys_of(mentions: Mentions, granularity: Granularity) -> Sequence[Hashable]:
    if granularity is Granularity.OBJECT:
        return sorted(mentions.nouns)
    if granularity is Granularity.ATTRIBUTE:
        return sorted(mentions.phrases)
    return sorted(mentions.relations)


def scene_mentions(
    subjects: Sequence[str],
    subject_attributes: Sequence[str],
    relations: Sequence[str],
    objects: Sequence[str],
    object_attributes: Sequence[str],
    relation_views: Sequence[str],
) -> list[Mentions]:
    """Mentions of the compositional corpus's scenes from their structured columns (exact, where
    the caption parser would miss unknown words): nouns subject and object, their attribute
    phrases, and (subject, relation, object) written as the scene's relation view."""
    out = []
    for s, sa, r, o, oa, view in zip(
        subjects,
        subject_attributes,
        relations,
        objects,
        object_attributes,
        relation_views,
        strict=True,
    ):
        out.append(
            Mentions(
                nouns=frozenset({s, o}),
                phrases=frozenset({(sa, s), (oa, o)}),
                relations={(s, r, o): view},
            )
        )
    return out


def mine_queries(
    captions: Sequence[str] | Sequence[Mentions],
    groups: Sequence[str],
    min_relevant: int = MIN_RELEVANT_ROWS,
    other_captions: dict[Granularity, int] | None = None,
    own_caption: bool = False,
) -> dict[Granularity, QuerySet]:
    """Queries of every granularity with at least `min_relevant` relevant rows (module doc).

    `own_caption` judges each row by its own caption instead, for corpora with one exact
    caption per item (the compositional corpus, whose captions are true by construction)."""
    needed = other_captions or OTHER_CAPTIONS_NEEDED
    mentions = [c if isinstance(c, Mentions) else caption_mentions(c) for c in captions]
    group_index = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    row_group = np.array([group_index[g] for g in groups])
    out: dict[Granularity, QuerySet] = {}
    for granularity in QUERY_GRANULARITIES:
        rows_of: dict[Hashable, list[int]] = defaultdict(list)
        for row, m in enumerate(mentions):
            for key in _keys_of(m, granularity):
                rows_of[key].append(row)
        texts, keys, masks = [], [], []
        surfaces: dict[Hashable, Counter[str]] = defaultdict(Counter)
        if granularity is Granularity.RELATION:
            for m in mentions:
                for key, text in m.relations.items():
                    surfaces[key][text] += 1
        for key in sorted(rows_of, key=str):
            rows = np.array(rows_of[key])
            per_group = np.bincount(row_group[rows], minlength=len(group_index))
            own = np.zeros(len(captions), dtype=np.int64)
            own[rows] = 1
            mask = own > 0 if own_caption else per_group[row_group] - own >= needed[granularity]
            if mask.sum() < min_relevant:
                continue
            keys.append(key)
            masks.append(mask)
            if granularity is Granularity.OBJECT:
                texts.append(object_query(key))  # type: ignore[arg-type]
            elif granularity is Granularity.ATTRIBUTE:
                texts.append(attribute_query(key))  # type: ignore[arg-type]
            else:  # the way the gallery's captions most often write it
                texts.append(min(surfaces[key].items(), key=lambda kv: (-kv[1], kv[0]))[0])
        relevant = np.array(masks) if masks else np.zeros((0, len(captions)), dtype=bool)
        out[granularity] = QuerySet(granularity, texts, keys, relevant)
    return out


def ranking_scores(
    queries: np.ndarray, gallery: np.ndarray, relevant: np.ndarray, length: int
) -> dict[str, np.ndarray]:
    """Per-query P@10 and AP@100 of s_ℓ search over the gallery's rows (ties by row order).

    AP@100 = (1 / min(R, 100)) Σ_{k ≤ 100} P@k · rel(k), R the number of relevant rows."""
    scores = prefix_vectors(queries, length) @ prefix_vectors(gallery, length).T
    k = min(TOP_K, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), 1), 1)
    hits = np.take_along_axis(relevant, order, axis=1).astype(np.float64)
    precision_at = np.cumsum(hits, axis=1) / np.arange(1, k + 1)
    total = np.minimum(relevant.sum(axis=1), k)
    average_precision = (precision_at * hits).sum(axis=1) / np.maximum(total, 1)
    return {
        "P@10": hits[:, :PRECISION_AT].sum(axis=1) / PRECISION_AT,
        "AP@100": average_precision,
    }


def gallery_retrieval(
    transform: Transform,
    queries: dict[Granularity, tuple[QuerySet, np.ndarray]],
    gallery: np.ndarray,
    contract: Contract,
) -> dict[str, Any]:
    """Every query set (with its embedded queries) at every contract prefix for one transform:
    {granularity: {"queries": n, "prefix": {ℓ: {"P@10", "AP@100"}}, "own": ..., "full": ...,
    "kept": AP@100 at own / at D}}."""
    rotated_gallery = transform(gallery)
    lengths = sorted(set(contract.values()))
    report: dict[str, Any] = {}
    for granularity, (query_set, embedded) in queries.items():
        if not len(query_set):
            continue
        rotated = transform(embedded)
        by_prefix = {}
        for length in lengths:
            scores = ranking_scores(rotated, rotated_gallery, query_set.relevant, length)
            by_prefix[str(length)] = {name: float(v.mean()) for name, v in scores.items()}
        own, full = by_prefix[str(contract[granularity])], by_prefix[str(lengths[-1])]
        report[granularity.value] = {
            "queries": len(query_set),
            "prefix": by_prefix,
            "own": own,
            "full": full,
            "kept": own["AP@100"] / full["AP@100"] if full["AP@100"] > 0 else 0.0,
        }
    return report


def gallery_table(reports: dict[str, dict[str, Any]], contract: Contract) -> str:
    """Markdown: per method, at each granularity's own prefix, P@10 and AP@100 (own / full D)
    and AP kept."""
    first = next(iter(reports.values()))
    granularities = [g for g in QUERY_GRANULARITIES if g.value in first]
    header = " | ".join(
        f"{g.value} @{contract[g]} ({first[g.value]['queries']} queries)" for g in granularities
    )
    lines = [
        "P@10 and AP@100 at the query's own prefix / at full D (AP kept = own / full):",
        "",
        f"| method | {header} |",
        "|---|" + "---|" * len(granularities),
    ]
    for name, report in reports.items():
        cells = []
        for g in granularities:
            r = report[g.value]
            cells.append(
                f"P@10 {r['own']['P@10']:.3f} / {r['full']['P@10']:.3f}, "
                f"AP {r['own']['AP@100']:.3f} / {r['full']['AP@100']:.3f} ({r['kept']:.2f})"
            )
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


@dataclass
class RetrievalTask:
    """Rows of one split with mined queries: the benchmark's data, and the supervision of the
    retrieval loss when it is the training split. `embedded` holds each query set's texts
    embedded with the cache's encoder."""

    rows: np.ndarray  # [N, D]
    queries: dict[Granularity, QuerySet]
    embedded: dict[Granularity, np.ndarray]

    def pairs(self) -> dict[Granularity, tuple[QuerySet, np.ndarray]]:
        return {g: (q, self.embedded[g]) for g, q in self.queries.items() if len(q)}

    def counts(self) -> dict[str, int]:
        return {g.value: len(q) for g, q in self.queries.items()}

    def save(self, path: Path) -> None:
        arrays: dict[str, np.ndarray] = {"rows": self.rows}
        for g, q in self.queries.items():
            arrays[f"{g.value}_texts"] = np.array(q.texts, dtype=str)
            arrays[f"{g.value}_keys"] = np.array([json.dumps(k) for k in q.keys], dtype=str)
            arrays[f"{g.value}_relevant"] = np.packbits(q.relevant, axis=1)
            arrays[f"{g.value}_embedded"] = self.embedded[g]
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> RetrievalTask:
        with np.load(path, allow_pickle=False) as data:
            rows = data["rows"]
            queries, embedded = {}, {}
            for g in QUERY_GRANULARITIES:
                if f"{g.value}_texts" not in data:
                    continue
                relevant = np.unpackbits(data[f"{g.value}_relevant"], axis=1, count=len(rows))
                queries[g] = QuerySet(
                    g,
                    data[f"{g.value}_texts"].tolist(),
                    [_key(json.loads(k)) for k in data[f"{g.value}_keys"].tolist()],
                    relevant.astype(bool),
                )
                embedded[g] = data[f"{g.value}_embedded"]
        return cls(rows, queries, embedded)


def _key(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list) else value


def retrieval_task(
    rows: np.ndarray,
    mentions: Sequence[str] | Sequence[Mentions],
    groups: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    min_relevant: int = MIN_RELEVANT_ROWS,
    own_caption: bool = False,
) -> RetrievalTask:
    """Mine the queries of `rows` (their captions or mentions, row-aligned) and embed them."""
    queries = mine_queries(mentions, groups, min_relevant, own_caption=own_caption)
    embedded = {
        g: embed(q.texts) if len(q) else np.zeros((0, rows.shape[1]), dtype=np.float32)
        for g, q in queries.items()
    }
    return RetrievalTask(np.asarray(rows, dtype=np.float32), queries, embedded)


def plot_gallery_curves(reports: dict[str, dict[str, Any]], contract: Contract, path: Path) -> Path:
    """AP@100 against prefix length, one panel per granularity (its query count in the title,
    a small one flagged), one line per method; each panel marks its granularity's own prefix;
    the legend outside."""
    from training.core.plots import (
        legend_outside,
        log_ticks,
        pyplot,
        sample_label,
        save_figure,
        series_styles,
    )

    plt = pyplot()
    first = next(iter(reports.values()))
    granularities = [g for g in QUERY_GRANULARITIES if g.value in first]
    styles = series_styles(reports)
    fig, axes = plt.subplots(
        1, len(granularities), figsize=(4.4 * len(granularities), 3.7), squeeze=False, sharey=True
    )
    for ax, granularity in zip(axes[0], granularities, strict=True):
        for name, report in reports.items():
            prefix = report[granularity.value]["prefix"]
            lengths = sorted(int(n) for n in prefix)
            ax.plot(
                lengths,
                [prefix[str(n)]["AP@100"] for n in lengths],
                label=name,
                markersize=4,
                **styles[name],
            )
        own = contract[granularity]
        ax.axvline(own, color="0.6", linewidth=1, linestyle=":", zorder=0)
        log_ticks(ax, "x", sorted(set(contract.values())), base=2)
        queries = int(first[granularity.value]["queries"])
        ax.set_title(
            f"{granularity.value} queries ({sample_label(queries, 'queries')})\n"
            f"own prefix {own} (dotted)",
            fontsize=9,
        )
        ax.set_xlabel("prefix length ℓ")
    axes[0][0].set_ylabel("AP@100 (higher is better)")
    fig.suptitle("Granularity retrieval on the held-out gallery: AP@100 by prefix", fontsize=10)
    fig.tight_layout()
    legend_outside(fig, list(axes[0]), title="method")
    return save_figure(fig, path)
