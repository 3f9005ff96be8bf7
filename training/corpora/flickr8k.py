"""Flickr8k captions (`Flickr8k.token.txt`, `<image>.jpg#<n>\\t<caption>`) and its splits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.core.errors import InputError
from training.corpora.records import Corpus, OnMalformed, Record

TOKEN_FILE = "Flickr8k.token.txt"
SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "dev": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}
SPLITS = (*SPLIT_FILES, "all")


class Flickr8kCorpus(Corpus):
    """One record per caption; `group` is the image file name, `fields` holds the split.

    `split` = train | dev | test keeps the captions of that split's images; `all` keeps every
    caption of the token file (including the few whose image is in no split).
    """

    kind = "flickr8k"

    def __init__(self, root: str | Path, split: str = "all", on_malformed: OnMalformed = "skip"):
        super().__init__(on_malformed)
        self.root = Path(root).expanduser()
        if split not in SPLITS:
            raise InputError(f"unknown Flickr8k split {split!r}; choose from {', '.join(SPLITS)}")
        self.split = split
        self.token_file = self.root / TOKEN_FILE
        if not self.token_file.is_file():
            raise InputError(f"not a Flickr8k folder (no {TOKEN_FILE}): {self.root}")
        self.image_split = self._read_splits()

    def _read_splits(self) -> dict[str, str]:
        image_split: dict[str, str] = {}
        for name, filename in SPLIT_FILES.items():
            path = self.root / filename
            if not path.is_file():
                if self.split == name:
                    raise InputError(f"split file for {name!r} not found: {path}")
                continue
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    image_split[line.strip()] = name
        return image_split

    def records(self) -> Iterator[Record]:
        with self.token_file.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                key, tab, caption = line.rstrip("\n").partition("\t")
                image, hash_, index = key.partition("#")
                where = f"{self.token_file.name}:{number}"
                if not tab or not hash_ or not index.isdigit() or not image:
                    self.report.malformed(
                        where, f"expected '<image>#<n>\\t<caption>', got {line!r}"
                    )
                    continue
                if not caption.strip():
                    self.report.malformed(where, "empty caption")
                    continue
                split = self.image_split.get(image, "none")
                if self.split != "all" and split != self.split:
                    continue
                yield Record(id=key, text=caption.strip(), group=image, fields={"split": split})

    def size_hint(self) -> int:
        with self.token_file.open(encoding="utf-8") as lines:
            images = (line.partition("#")[0] for line in lines if line.strip())
            if self.split == "all":
                return sum(1 for _ in images)
            return sum(1 for image in images if self.image_split.get(image) == self.split)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.root.resolve()), "split": self.split}
