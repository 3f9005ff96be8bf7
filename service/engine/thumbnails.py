"""Thumbnails of a bundle's images for the page, served from the bundle's image root only.

    images = BundleImages(bundle, root=None)   # root None: the folder holding every image
    images.thumbnail(row)                      # JPEG bytes; NotFoundError for anything else

A row's image is its `image_path` metadata value: relative to the corpus root (what the embed
job writes now) or absolute (older caches). A relative path is joined to the image root. It is
served only when the path, resolved (symbolic links followed, `..` removed), lies inside the
resolved image root, names a file with an image suffix and decodes as an image: a path that
leads out of the root — in the metadata, or through a link inside the root — is never read.
The root is the one given (`strata serve --image-root`, the same root hits' paths are resolved
against), else the corpus root the cache recorded (`recorded_image_root`), else the deepest
folder that holds every image the bundle lists; when that would be the file system's root, no
image is served without `--image-root`. The thumbnail is re-encoded (JPEG, longest side
`THUMBNAIL_PIXELS`), so the bytes sent are an image decoded from the file, never the file.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from pathlib import Path

from indexer.format.bundle import Bundle
from service.errors import NotFoundError
from training.core.encoders.images import IMAGE_SUFFIXES

IMAGE_COLUMN = "image_path"
THUMBNAIL_PIXELS = 320
CACHED_THUMBNAILS = 512


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, resolved, lies inside the resolved `root` (the root itself excluded)."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # missing, a loop of links, a NUL byte
        return False
    real_root = root.resolve()
    return resolved != real_root and resolved.is_relative_to(real_root)


def recorded_image_root(bundle: Bundle) -> Path | None:
    """The corpus root the bundle's cache recorded for its relative image paths, if any."""
    root = bundle.manifest.source.get("image_root")
    return Path(root) if root else None


def common_root(paths: list[str]) -> Path | None:
    """The deepest folder holding every path; None for no paths, or when that is `/`."""
    folders = {os.path.normpath(Path(p).absolute().parent) for p in paths if p}
    if not folders:
        return None
    try:
        root = Path(os.path.commonpath(sorted(folders)))
    except ValueError:
        return None
    return None if root == Path(root.anchor) else root


class BundleImages:
    """The image of each row of one bundle version, as a thumbnail, from its image root."""

    def __init__(self, bundle: Bundle, root: Path | None = None) -> None:
        self.bundle = bundle
        self._paths: list[str | None] | None = None
        table = bundle.metadata([]).schema
        self.has_images = IMAGE_COLUMN in table.names
        if root is None:
            root = recorded_image_root(bundle)
        if root is None and self.has_images:
            root = common_root([p for p in self.paths if p])
        self.root = root.expanduser().resolve() if root is not None else None
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def paths(self) -> list[str | None]:
        if self._paths is None:
            self._paths = (
                self.bundle.metadata(range(self.bundle.rows)).column(IMAGE_COLUMN).to_pylist()
            )
        return self._paths

    def path_of(self, row: int) -> Path:
        """The row's image file, checked to lie inside the root; NotFoundError otherwise."""
        if self.root is None or not self.has_images:
            raise NotFoundError(f"bundle {self.bundle.name} serves no images")
        if not 0 <= row < self.bundle.rows:
            raise NotFoundError(f"row {row} outside [0, {self.bundle.rows}) of {self.bundle.name}")
        value = self.paths[row]
        if not value:
            raise NotFoundError(f"row {row} has no image")
        path = Path(value) if Path(value).is_absolute() else self.root / value
        if not inside(path, self.root) or path.suffix.lower() not in IMAGE_SUFFIXES:
            raise NotFoundError(f"row {row}'s image is not under the image root")
        resolved = path.resolve()
        if not resolved.is_file():
            raise NotFoundError(f"row {row}'s image is not a file")
        return resolved

    def thumbnail(self, row: int) -> bytes:
        """JPEG bytes of the row's image, longest side at most THUMBNAIL_PIXELS."""
        with self._lock:
            if row in self._cache:
                self._cache.move_to_end(row)
                return self._cache[row]
        data = render_thumbnail(self.path_of(row))
        with self._lock:
            self._cache[row] = data
            while len(self._cache) > CACHED_THUMBNAILS:
                self._cache.popitem(last=False)
        return data


def render_thumbnail(path: Path, pixels: int = THUMBNAIL_PIXELS) -> bytes:
    """The image at `path` re-encoded as a JPEG thumbnail; NotFoundError when it does not
    decode (PIL's decompression-bomb guard included)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.thumbnail((pixels, pixels))
            out = io.BytesIO()
            image.convert("RGB").save(out, format="JPEG", quality=85)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        kind = type(exc).__name__
        raise NotFoundError(f"{path.name} does not decode as an image ({kind})") from None
    return out.getvalue()
