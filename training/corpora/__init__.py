"""Corpora: readers that yield `Record`s (id, text, image path, group, extra fields)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.core.errors import InputError
from training.corpora.coco import CocoCaptionsCorpus
from training.corpora.compositional import CompositionalCorpus
from training.corpora.files import ImageFolderCorpus, TextFileCorpus
from training.corpora.flickr8k import Flickr8kCorpus
from training.corpora.records import Corpus, MalformedInputError, OnMalformed, ReadReport, Record

CORPUS_KINDS = ("flickr8k", "coco", "images", "texts", "compositional")

__all__ = [
    "CORPUS_KINDS",
    "CocoCaptionsCorpus",
    "CompositionalCorpus",
    "Corpus",
    "Flickr8kCorpus",
    "ImageFolderCorpus",
    "MalformedInputError",
    "ReadReport",
    "Record",
    "TextFileCorpus",
    "open_corpus",
]


def open_corpus(
    kind: str,
    path: str | Path | None = None,
    *,
    split: str = "all",
    images: str | Path | None = None,
    scenes: int = 20_000,
    seed: int = 0,
    on_malformed: OnMalformed = "skip",
) -> Corpus:
    """A corpus by kind: the one place the CLI and the jobs turn a user's choice into a reader."""
    if kind == "compositional":
        return CompositionalCorpus(scenes=scenes, seed=seed, split=split)
    if kind not in CORPUS_KINDS:
        raise InputError(f"unknown corpus kind {kind!r}; choose from {', '.join(CORPUS_KINDS)}")
    if path is None:
        raise InputError(f"corpus kind {kind!r} needs a path")
    readers: dict[str, Any] = {
        "flickr8k": lambda: Flickr8kCorpus(path, split=split, on_malformed=on_malformed),
        "coco": lambda: CocoCaptionsCorpus(path, images=images, on_malformed=on_malformed),
        "images": lambda: ImageFolderCorpus(path, on_malformed=on_malformed),
        "texts": lambda: TextFileCorpus(path, on_malformed=on_malformed),
    }
    return readers[kind]()
