"""The record every corpus yields, and the bookkeeping of lines a reader could not use."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from training.core.errors import InputError

log = logging.getLogger(__name__)

OnMalformed = Literal["skip", "error"]


@dataclass(frozen=True)
class Record:
    """One row of a corpus.

    `group` names the image a caption belongs to (all captions of one image share it); for an
    image-only or text-only record it is the record's own id. `fields` carries extra metadata
    columns (split, granularity views, ground-truth factors) into the cache's metadata.
    """

    id: str
    text: str | None = None
    image_path: str | None = None
    group: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)


class MalformedInputError(InputError):
    """A line or entry of a corpus file that cannot be read as a record."""


@dataclass
class ReadReport:
    """What a reader skipped and why. Nothing is dropped without being counted here."""

    on_malformed: OnMalformed = "skip"
    skipped: int = 0
    examples: list[str] = field(default_factory=list)
    max_examples: int = 20

    def malformed(self, where: str, why: str) -> None:
        message = f"{where}: {why}"
        if self.on_malformed == "error":
            raise MalformedInputError(message)
        self.skipped += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(message)
        log.warning("skipped %s", message)

    def as_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "examples": list(self.examples)}


class Corpus(abc.ABC):
    """A source of records. Iterating twice yields the same records in the same order."""

    kind: str

    def __init__(self, on_malformed: OnMalformed = "skip") -> None:
        self.report = ReadReport(on_malformed=on_malformed)

    @abc.abstractmethod
    def records(self) -> Iterator[Record]:
        """The records, in a stable order; malformed entries go to `self.report`."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """What this corpus is (kind, source, options), as recorded in a cache manifest."""

    def image_root(self) -> Path | None:
        """The folder this corpus's image paths lie under: the cache stores each image path
        relative to it, and the root in its manifest (None: no images, paths kept as given)."""
        return None

    def size_hint(self) -> int | None:
        """How many records iteration will yield, where cheap to know (for progress bars)."""
        return None

    def __iter__(self) -> Iterator[Record]:
        self.report = ReadReport(on_malformed=self.report.on_malformed)
        return self.records()
