"""Fitting a CEDAR artifact (`fit_cedar`, what `strata train cedar` and the demo call): the
rotation learnt on a cache's train rows, its concepts named from a vocabulary (by data where
the cache has captions), the vocabulary readout, and the artifact written with its catalog."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from training.cedar.concepts import (
    CatalogEntry,
    ConceptName,
    build_catalog,
    catalog_json,
    name_by_data,
    name_directions,
    read_vocabulary,
)
from training.cedar.data import SplitRows, load_split_rows
from training.cedar.evaluate import (
    SparseMethod,
    rotation_method,
)
from training.cedar.floor import dev_floor
from training.cedar.gallery_quality import (
    caption_relevance,
    embed_words,
)
from training.cedar.naming import (
    CaptionVocabulary,
    caption_vocabulary,
    cooccurrence,
)
from training.cedar.readout import (
    ReadoutConfig,
    mean_held_out,
    readout_record,
    readout_tensors,
    text_directions,
)
from training.cedar.readout_rows import learn_readout
from training.cedar.train import CedarConfig, CedarResult, train_cedar
from training.core.artifacts import TransformArtifact, data_fingerprint
from training.core.errors import InputError
from training.core.granularity import default_contract
from training.core.seeding import seeded
from training.loop import work_folder

log = logging.getLogger(__name__)


def naming_vocabulary(
    data: SplitRows, index: np.ndarray, vocabulary: Path | None
) -> tuple[CaptionVocabulary, str]:
    """The naming vocabulary: the user's terms, or the clean vocabulary of the rows' captions."""
    if vocabulary is not None:
        return CaptionVocabulary.given(read_vocabulary(vocabulary)), str(vocabulary)
    vocab = caption_vocabulary(data.texts(index), min_count=5)
    return vocab, (
        "captions: nouns, adjectives and verbs seen at least 5 times (stop words out, verb forms "
        "folded, misspellings merged)"
    )


def vocabulary_embeddings(
    data: SplitRows, index: np.ndarray, vocabulary: Path | None, encoder_spec: str | None
) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """The vocabulary's words, their embeddings, and a description for the manifest."""
    vocab, source = naming_vocabulary(data, index, vocabulary)
    if not vocab.words:
        raise InputError("the vocabulary is empty: give --vocabulary")
    embeddings = embed_words(vocab.words, encoder_spec or data.encoder)
    return vocab.words, embeddings, vocabulary_info(vocab, source)


def vocabulary_info(vocab: CaptionVocabulary, source: str) -> dict[str, Any]:
    return {"source": source, "size": len(vocab.words), "classes": dict(Counter(vocab.classes))}


@dataclass
class NamingRows:
    """What naming by data reads on the training cache: the vocabulary, its embeddings, and the
    relevance of the train and val rows (None without captions)."""

    vocab: CaptionVocabulary
    embeddings: np.ndarray
    info: dict[str, Any]
    train: sparse.csr_matrix | None
    val: sparse.csr_matrix | None


def naming_rows(data: SplitRows, vocabulary: Path | None, encoder: str | None) -> NamingRows:
    train, val = data.rows("train"), data.rows("val")
    vocab, source = naming_vocabulary(data, train, vocabulary)
    if not vocab.words:
        raise InputError("the vocabulary is empty: give --vocabulary")
    embeddings = embed_words(vocab.words, encoder or data.encoder)
    return NamingRows(
        vocab,
        embeddings,
        vocabulary_info(vocab, source),
        caption_relevance(data, train, vocab),
        caption_relevance(data, val, vocab),
    )


def method_names(
    method: SparseMethod,
    rows: NamingRows,
    data: SplitRows,
    mean: np.ndarray,
    k: int,
    threshold: float | None = None,
) -> tuple[list[ConceptName], dict[str, Any]]:
    """A method's concept names: by data where the cache has captions (train rows choose, val
    rows keep or drop, concepts.name_by_data), else by cosine alone."""
    words = rows.vocab.words
    if rows.train is None or rows.val is None:
        names = name_directions(method.directions, mean, words, rows.embeddings)
        return names, {"by": "cosine"}
    n = len(method.directions)
    x = data.embeddings
    train = cooccurrence(method.concepts(x[data.rows("train")], k), rows.train, n)
    val = cooccurrence(method.concepts(x[data.rows("val")], k), rows.val, n)
    names, info = name_by_data(
        method.directions, mean, words, rows.embeddings, train, val, method.signed, threshold
    )
    return names, {"by": "data", "k": k, **info}


@dataclass
class FittedCedar:
    artifact: TransformArtifact
    result: CedarResult
    catalog: list[CatalogEntry]
    vocabulary: dict[str, Any]
    naming: dict[str, Any]
    readout: dict[str, Any] | None = None  # the readout's record, when one was learnt


def fit_cedar(
    cache: Path,
    out: Path,
    config: CedarConfig,
    vocabulary: Path | None = None,
    encoder: str | None = None,
    work: Path | None = None,
    device: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    name_threshold: float | None = None,
    readout: ReadoutConfig | None = None,
) -> FittedCedar:
    """Learn CEDAR on a cache's train rows, name its concepts, learn the vocabulary readout
    (`readout`; skipped, with a log line, for a cache without captions), write the artifact to
    `out`. A cache without a split column is split by `config.seed` (its artifact records it)."""
    with seeded(config.seed):  # the naming's numpy sums too, not only the training
        data = load_split_rows(cache, seed=config.seed)
        train_rows, val_rows = data.rows("train"), data.rows("val")
        x = data.embeddings
        anchors = None
        if config.anchor_words:
            words = caption_vocabulary(data.texts(train_rows), min_count=5).words
            found = embed_words(words[: config.anchor_words], encoder or data.encoder)
            anchors = text_directions(found, x[train_rows].mean(axis=0))
        result = train_cedar(
            x[train_rows], x[val_rows], config,
            work_dir=work_folder(out, work), device=device, progress=progress, anchors=anchors,
        )  # fmt: skip
        rows = naming_rows(data, vocabulary, encoder)
        method = rotation_method("cedar", result.rotation, result.mean)
        names, naming = method_names(method, rows, data, result.mean, config.k, name_threshold)
        vocab_info = rows.info
        catalog = build_catalog(
            names, result.rotation, result.mean, config.k, x[train_rows],
            data.metadata.column("id").take(train_rows).to_pylist(), data.texts(train_rows),
        )  # fmt: skip
        best = result.history[result.best_epoch - 1]
        learnt, readout_info, tensors, extra = None, None, {}, {}
        if readout is not None and "caption" not in data.metadata.column_names:
            log.info("no captions in %s: no vocabulary readout, the axes alone", cache)
        elif readout is not None:
            learnt, readout_info = learn_readout(
                data, result.rotation, result.mean, config.k,
                lambda words: embed_words(words, encoder or data.encoder), readout, progress,
            )  # fmt: skip
            readout_info.update(mean_held_out(learnt))
            tensors = readout_tensors(learnt)
            extra = {"readout": {**readout_record(learnt), "config": readout.model_dump()}}
            extra["readout"]["training"] = {k: v for k, v in readout_info.items() if k != "history"}
        artifact = TransformArtifact(
            method="cedar",
            rotation=result.rotation,
            mean=result.mean,
            contract=default_contract(x.shape[1]),
            encoder=data.encoder,
            config=config.model_dump(),
            data_fingerprint=data_fingerprint(x[train_rows]),
            metrics={
                "validation": best,
                "epochs_run": result.epochs_run,
                "seconds": result.seconds,
            },
            extra={
                "k": config.k,
                "vocabulary": vocab_info,
                "naming": naming,
                "catalog": catalog_json(catalog),
                **extra,
            },
            tensors=tensors,
        )
        if "caption" in data.metadata.column_names:  # which concepts are shown: floor.py
            artifact.extra["floor"] = dev_floor(artifact, data, str(cache))
            log.info("precision floor %.2f, picked on val", artifact.extra["floor"]["value"])
        artifact.save(out, overwrite=overwrite)
        return FittedCedar(artifact, result, catalog, vocab_info, naming, readout_info)
