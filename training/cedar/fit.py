"""Fitting a CEDAR artifact (`fit_cedar`, what `strata train cedar` and the demo call): the
rotation learnt on a cache's train rows, its concepts named from a vocabulary (by data where
the cache has captions), the vocabulary readout, and the artifact written with its catalog.
It takes one `CedarFitConfig` and returns one `FittedCedar`."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict
from scipy import sparse

from training.cedar.caption_words import CaptionVocabulary, caption_vocabulary
from training.cedar.catalog import (
    CatalogEntry,
    ConceptName,
    build_catalog,
    catalog_json,
    name_by_data,
    name_directions,
    read_vocabulary,
)
from training.cedar.concepts import REFERENCE
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
from training.cedar.naming import cooccurrence
from training.cedar.readout.artifact import readout_record, readout_tensors
from training.cedar.readout.rows import learn_readout
from training.cedar.readout.vocabulary import ReadoutConfig, mean_held_out, text_directions
from training.cedar.reference_agreement import reference_agreement
from training.cedar.train import CedarConfig, CedarResult, train_cedar
from training.core.artifacts import TransformArtifact, data_fingerprint
from training.core.config import ConfigModel
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


class CedarFitConfig(ConfigModel):
    """What `fit_cedar` is asked to do (`strata train cedar`'s flags, the demo's choices):
    learn on `cache`, write the artifact to `out`; immutable once made."""

    model_config = ConfigDict(frozen=True)

    cache: Path
    out: Path
    cedar: CedarConfig = CedarConfig()  # the rotation's training (its seed splits the rows too)
    readout: ReadoutConfig | None = None  # the vocabulary readout; None: the axes alone
    vocabulary: Path | None = None  # naming terms, one per line (default: the captions' words)
    encoder: str | None = None  # embeds the vocabulary (default: the cache's encoder)
    name_threshold: float | None = None  # val precision a name must reach (None: picked on val)
    work: Path | None = None  # checkpoint folder (default: OUT.work)
    device: str = "auto"
    overwrite: bool = False
    progress: bool = True


@dataclass
class FittedReadout:
    """The vocabulary readout learnt beside the axes: its training record (learn_readout's,
    with the held-out means) and what the artifact stores of it (`tensors`, `record`: its
    extra["readout"])."""

    info: dict[str, Any]
    tensors: dict[str, np.ndarray]
    record: dict[str, Any]


@dataclass
class FittedCedar:
    """What `fit_cedar` made: the artifact (written), the rotation's training, the catalog,
    the vocabulary and naming records, and the readout (None when none was learnt)."""

    artifact: TransformArtifact
    result: CedarResult
    catalog: list[CatalogEntry]
    vocabulary: dict[str, Any]
    naming: dict[str, Any]
    readout: FittedReadout | None = None


def fit_readout(data: SplitRows, result: CedarResult, fit: CedarFitConfig) -> FittedReadout | None:
    """The vocabulary readout over the learnt rotation (`fit.readout`); None without one, or,
    with a log line, for a cache without captions."""
    if fit.readout is None:
        return None
    if "caption" not in data.metadata.column_names:
        log.info("no captions in %s: no vocabulary readout, the axes alone", fit.cache)
        return None
    learnt, info = learn_readout(
        data,
        result.rotation,
        result.mean,
        fit.cedar.k,
        lambda words: embed_words(words, fit.encoder or data.encoder),
        fit.readout,
        fit.progress,
    )
    info.update(mean_held_out(learnt))
    record = {**readout_record(learnt), "config": fit.readout.model_dump()}
    record["training"] = {k: v for k, v in info.items() if k != "history"}
    return FittedReadout(info, readout_tensors(learnt), record)


def fit_cedar(fit: CedarFitConfig) -> FittedCedar:
    """Learn CEDAR on a cache's train rows, name its concepts, learn the vocabulary readout
    (`fit.readout`: `fit_readout`), write the artifact to `fit.out`. A cache without a split
    column is split by the training's seed (its artifact records it)."""
    config = fit.cedar
    with seeded(config.seed):  # the naming's numpy sums too, not only the training
        data = load_split_rows(fit.cache, seed=config.seed)
        train_rows, val_rows = data.rows("train"), data.rows("val")
        x = data.embeddings
        anchors = None
        if config.anchor_words:
            words = caption_vocabulary(data.texts(train_rows), min_count=5).words
            found = embed_words(words[: config.anchor_words], fit.encoder or data.encoder)
            anchors = text_directions(found, x[train_rows].mean(axis=0))
        result = train_cedar(
            x[train_rows],
            x[val_rows],
            config,
            work_dir=work_folder(fit.out, fit.work),
            device=fit.device,
            progress=fit.progress,
            anchors=anchors,
        )
        rows = naming_rows(data, fit.vocabulary, fit.encoder)
        method = rotation_method("cedar", result.rotation, result.mean)
        names, naming = method_names(method, rows, data, result.mean, config.k, fit.name_threshold)
        catalog = build_catalog(
            names,
            result.rotation,
            result.mean,
            config.k,
            x[train_rows],
            data.metadata.column("id").take(train_rows).to_pylist(),
            data.texts(train_rows),
        )
        best = result.history[result.best_epoch - 1]
        readout = fit_readout(data, result, fit)
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
                "vocabulary": rows.info,
                "naming": naming,
                "catalog": catalog_json(catalog),
                **({} if readout is None else {"readout": readout.record}),
            },
            tensors={} if readout is None else readout.tensors,
        )
        if "caption" in data.metadata.column_names:  # which concepts are shown: floor.py
            artifact.extra["floor"] = dev_floor(artifact, data, str(fit.cache))
            log.info("precision floor %.2f, picked on val", artifact.extra["floor"]["value"])
            reference = reference_agreement(artifact, data)  # what a gallery's shift is read by
            if reference is not None:
                artifact.tensors[REFERENCE] = reference
        artifact.save(fit.out, overwrite=fit.overwrite)
        return FittedCedar(artifact, result, catalog, rows.info, naming, readout)
