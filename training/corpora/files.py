"""Plain inputs: a folder of images, or a JSONL / CSV file of texts."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.core.encoders.images import IMAGE_SUFFIXES
from training.core.errors import InputError
from training.corpora.records import Corpus, OnMalformed, Record

RESERVED = ("id", "text", "group", "image_path")


class ImageFolderCorpus(Corpus):
    """Every image file under a folder (recursively, sorted); the id is the relative path."""

    kind = "images"

    def __init__(self, root: str | Path, on_malformed: OnMalformed = "skip") -> None:
        super().__init__(on_malformed)
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise InputError(f"image folder not found: {self.root}")

    def records(self) -> Iterator[Record]:
        for path in sorted(p for p in self.root.rglob("*") if p.is_file()):
            relative = path.relative_to(self.root).as_posix()
            if path.suffix.lower() not in IMAGE_SUFFIXES:
                self.report.malformed(
                    relative, f"not an image file suffix ({path.suffix or 'none'})"
                )
                continue
            yield Record(id=relative, image_path=str(path.resolve()), group=relative)

    def image_root(self) -> Path:
        return self.root.resolve()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.root.resolve())}


class TextFileCorpus(Corpus):
    """Texts from JSONL (one object per line) or CSV (with a header).

    Each entry needs `text`; `id` defaults to `<line number>`, `group` to the id, and
    `image_path` (optional) is taken relative to the file's folder. Other columns are kept as
    string metadata.
    """

    kind = "texts"

    def __init__(self, path: str | Path, on_malformed: OnMalformed = "skip") -> None:
        super().__init__(on_malformed)
        self.path = Path(path).expanduser()
        if not self.path.exists() or self.path.is_dir():  # a FIFO is fine: it is read once
            raise InputError(f"text file not found: {self.path}")
        if self.path.suffix.lower() not in (".jsonl", ".csv"):
            raise InputError(f"texts must be .jsonl or .csv, got {self.path.name}")

    def records(self) -> Iterator[Record]:
        seen: set[str] = set()
        for line_number, entry in self._entries():
            where = f"{self.path.name}:{line_number}"
            record = self._record(entry, line_number, where)
            if record is None:
                continue
            if record.id in seen:
                self.report.malformed(where, f"duplicate id {record.id!r}")
                continue
            seen.add(record.id)
            yield record

    def _entries(self) -> Iterator[tuple[int, Any]]:
        with self.path.open(encoding="utf-8", newline="") as handle:
            if self.path.suffix.lower() == ".csv":
                reader = csv.DictReader(handle)
                if not reader.fieldnames or "text" not in reader.fieldnames:
                    raise InputError(f"{self.path} has no 'text' column in its header")
                for row in reader:
                    yield reader.line_num, row
                return
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    self.report.malformed(f"{self.path.name}:{number}", f"invalid JSON ({exc.msg})")

    def _record(self, entry: Any, line_number: int, where: str) -> Record | None:
        if not isinstance(entry, dict):
            self.report.malformed(where, "expected a JSON object")
            return None
        if None in entry:  # csv.DictReader puts surplus cells under the None key
            self.report.malformed(where, "more cells than header columns")
            return None
        text = entry.get("text")
        if not isinstance(text, str) or not text.strip():
            self.report.malformed(where, "missing or empty 'text'")
            return None
        record_id = str(entry.get("id") or line_number)
        image = entry.get("image_path") or None
        if image is not None:
            image = str((self.path.parent / str(image)).resolve())
        extra = {
            key: "" if value is None else str(value)
            for key, value in entry.items()
            if key not in RESERVED
        }
        group = str(entry.get("group") or record_id)
        return Record(id=record_id, text=text.strip(), image_path=image, group=group, fields=extra)

    def image_root(self) -> Path:
        return self.path.parent.resolve()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path.resolve())}
