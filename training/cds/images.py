"""The images CDS is measured over: named, loaded one at a time, undecodable ones skipped."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.core.encoders.images import IMAGE_SUFFIXES, ImageDecodeError, decode_image
from training.core.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class ImageSource:
    """Named images, loaded one at a time (`load(i)` gives a PIL image or ImageDecodeError)."""

    names: list[str]
    load: Callable[[int], Any]

    def __len__(self) -> int:
        return len(self.names)

    @classmethod
    def from_folder(cls, folder: Path, limit: int | None = None) -> ImageSource:
        """Every image file under `folder` (recursively, sorted by path), the first `limit`."""
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise InputError(f"image folder not found: {folder}")
        paths = sorted(
            p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
        )
        if limit is not None:
            paths = paths[:limit]
        if not paths:
            raise InputError(f"no image files ({', '.join(sorted(IMAGE_SUFFIXES))}) in {folder}")
        return cls([str(p.relative_to(folder)) for p in paths], lambda i: decode_image(paths[i]))

    @classmethod
    def from_images(cls, images: Sequence[Any], prefix: str = "image") -> ImageSource:
        return cls([f"{prefix}-{i}" for i in range(len(images))], lambda i: images[i])

    def batches(self, size: int) -> Iterator[tuple[list[int], list[Any], list[str]]]:
        """(indices, images, skipped names) per batch; undecodable images are skipped."""
        for start in range(0, len(self), size):
            indices, images, skipped = [], [], []
            for i in range(start, min(start + size, len(self))):
                try:
                    images.append(self.load(i))
                    indices.append(i)
                except ImageDecodeError as error:
                    log.warning("skipping %s: %s", self.names[i], error)
                    skipped.append(self.names[i])
            yield indices, images, skipped
