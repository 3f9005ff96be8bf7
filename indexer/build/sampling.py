"""The training sample of the indexes that need one (IVF, PQ): a bounded uniform reservoir.

Algorithm R over the rows as they stream past: the first `size` rows fill the reservoir; row t
(0-based, t ≥ size) replaces a uniformly chosen slot with probability size / (t + 1). Every row
seen so far is in the sample with the same probability, and memory is `size` rows whatever the
gallery's size. The build feeds it the first shards only (until it has seen a few times `size`
rows), so the sample costs a short extra read, not a second pass over the gallery.
"""

from __future__ import annotations

import numpy as np


class Reservoir:
    """A uniform sample of at most `size` rows of the batches passed to `add`."""

    def __init__(self, size: int, dim: int, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"a reservoir needs a positive size, got {size}")
        self.size = size
        self.rows = np.empty((size, dim), dtype=np.float32)
        self.seen = 0
        self._rng = np.random.default_rng(seed)

    def add(self, batch: np.ndarray) -> None:
        """Offer every row of `batch` [n, dim] in order (vectorised Algorithm R)."""
        batch = np.asarray(batch, dtype=np.float32)
        n = len(batch)
        fill = min(max(self.size - self.seen, 0), n)
        self.rows[self.seen : self.seen + fill] = batch[:fill]
        if fill < n:
            positions = np.arange(self.seen + fill, self.seen + n)  # the global t of each row
            slots = self._rng.integers(0, positions + 1)  # uniform in [0, t]
            taken = np.flatnonzero(slots < self.size)
            # rows are applied in order, so a later row wins a slot chosen twice
            last = len(taken) - 1 - np.unique(slots[taken][::-1], return_index=True)[1]
            self.rows[slots[taken][last]] = batch[fill + taken[last]]
        self.seen += n

    @property
    def full(self) -> bool:
        return self.seen >= self.size

    def sample(self) -> np.ndarray:
        """The sample so far, [min(seen, size), dim]."""
        return self.rows[: min(self.seen, self.size)]
