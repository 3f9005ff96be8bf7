"""Image decoding at the edge: one place that turns a file into an RGB PIL image or says why not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.core.errors import InputError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})


class ImageDecodeError(InputError):
    """A file that is missing or is not an image PIL can decode."""


def decode_image(source: str | Path | bytes) -> Any:
    """A fully decoded RGB image from a path or encoded bytes; ImageDecodeError otherwise."""
    import io

    from PIL import Image, UnidentifiedImageError

    label = "image bytes" if isinstance(source, bytes) else str(source)
    try:
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.convert("RGB")
    except FileNotFoundError as exc:
        raise ImageDecodeError(f"image not found: {label}") from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"cannot decode image {label}: {exc}") from exc
