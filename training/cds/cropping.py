"""Shifted-context cropping: two crops of one image, s patches apart, and the patches they share.

The issue's recipe is "resize to (p + s)·n pixels, two p·n crops offset by s·n diagonally
(s = 1 by default), the (p − s)² shared patches compared". Here, for a ViT whose input is a
p × p grid of n × n-pixel patches (ViT-B-16 at 224 px: p = 14, n = 16):

- p = the grid size in patches per side, n = the patch size in pixels, s = the shift in patches
  (1 ≤ s ≤ p − 2, so the shared grid has at least 2 × 2 patches and a diagonal);
- the image is resized, shorter side first and then centre-cropped as open_clip's own
  preprocessing does, to a square canvas of (p + s)·n pixels;
- crop A is the canvas's top-left p·n × p·n square, crop B the same square moved s·n pixels
  right and s·n pixels down; each is one model input;
- patch (r, c) of B covers the canvas pixels of patch (r + s, c + s) of A, so A's patches
  [s:, s:] are B's patches [:p − s, :p − s]: the (p − s)² shared patches. Both hold exactly the
  same pixels; only their context (the rest of the crop) and their grid position differ.

Shared patch (r, c), 0 ≤ r, c < p − s, is A's patch (r + s, c + s) and B's patch (r, c); maps
over the shared grid are flattened row-major, like the model's own patch order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from training.core.errors import InputError


@dataclass(frozen=True)
class CropGeometry:
    """The crop layout for a p × p grid of n-pixel patches shifted by s patches."""

    grid: int  # p: patches per side of one model input
    patch: int  # n: pixels per patch side
    shift: int = 1  # s: shift between the two crops, in patches

    def __post_init__(self) -> None:
        if self.grid < 3 or self.patch < 1:
            raise InputError(
                f"shifted cropping needs a grid of at least 3 patches and a patch size >= 1, "
                f"got grid {self.grid}, patch {self.patch}"
            )
        if not 1 <= self.shift <= self.grid - 2:
            raise InputError(
                f"--shift must be between 1 and {self.grid - 2} for a {self.grid}-patch grid, "
                f"got {self.shift}"
            )

    @property
    def canvas(self) -> int:
        """(p + s)·n: the side of the resized image both crops are taken from."""
        return (self.grid + self.shift) * self.patch

    @property
    def crop(self) -> int:
        """p·n: the side of one crop (the model's input size)."""
        return self.grid * self.patch

    @property
    def offset(self) -> int:
        """s·n: how far crop B sits right of and below crop A, in pixels."""
        return self.shift * self.patch

    @property
    def shared_side(self) -> int:
        """p − s: patches per side of the shared grid."""
        return self.grid - self.shift

    @property
    def diagonal(self) -> float:
        """√2·(p − s − 1): the CDS normaliser, the shared grid's diagonal in patches."""
        return math.sqrt(2.0) * (self.shared_side - 1)

    @property
    def box_a(self) -> tuple[int, int, int, int]:
        """Crop A as a PIL box (left, upper, right, lower) on the canvas."""
        return (0, 0, self.crop, self.crop)

    @property
    def box_b(self) -> tuple[int, int, int, int]:
        """Crop B as a PIL box, s·n pixels right and down of A."""
        return (self.offset, self.offset, self.offset + self.crop, self.offset + self.crop)

    @cached_property
    def shared_a(self) -> np.ndarray:
        """Flat indices (row-major on the p × p grid) of A's shared patches [s:, s:]."""
        rows, cols = np.divmod(np.arange(self.shared_side**2), self.shared_side)
        return (rows + self.shift) * self.grid + (cols + self.shift)

    @cached_property
    def shared_b(self) -> np.ndarray:
        """Flat indices of B's shared patches [:p − s, :p − s], in the same order as `shared_a`."""
        rows, cols = np.divmod(np.arange(self.shared_side**2), self.shared_side)
        return rows * self.grid + cols

    def shared(self, maps_a: np.ndarray, maps_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Restrict maps [..., p²] of crops A and B to the shared patches: ([..., (p − s)²] × 2)."""
        return np.take(maps_a, self.shared_a, axis=-1), np.take(maps_b, self.shared_b, axis=-1)


def square_canvas(image: Any, size: int) -> Any:
    """The image resized (bicubic) so its shorter side is `size`, then centre-cropped square."""
    from PIL import Image

    width, height = image.size
    if (width, height) == (size, size):
        return image.convert("RGB")
    scale = size / min(width, height)
    new = (max(size, round(width * scale)), max(size, round(height * scale)))
    resized = image.convert("RGB").resize(new, Image.Resampling.BICUBIC)
    left, top = (new[0] - size) // 2, (new[1] - size) // 2
    return resized.crop((left, top, left + size, top + size))


def shifted_crops(image: Any, geometry: CropGeometry) -> tuple[Any, Any]:
    """(crop A, crop B) of a PIL image: the canvas of (p + s)·n pixels and its two p·n crops."""
    canvas = square_canvas(image, geometry.canvas)
    return canvas.crop(geometry.box_a), canvas.crop(geometry.box_b)
