"""A .npy file written as a stream: the store's and the postings' files are written front to back,
hashed on the way, never held whole in RAM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.lib.format import dtype_to_descr, write_array_header_1_0

from training.core.files import HashedFile


class NpyStream:
    """A new .npy file of a known length (rows of `row_shape`) written front to back (np.save's
    header and bytes), hashed on the way (a `HashedFile`: never over an existing file)."""

    def __init__(
        self, path: Path, dtype: np.dtype, length: int, row_shape: tuple[int, ...] = ()
    ) -> None:
        self.path, self.dtype, self.length = path, dtype, length
        self.row_shape = row_shape
        self.written = 0
        self._file = HashedFile(path)
        shape = (length, *row_shape)
        header = {"descr": dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        write_array_header_1_0(self._file, header)

    def write(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array, dtype=self.dtype)
        if array.shape[1:] != self.row_shape:
            raise ValueError(
                f"{self.path.name}: rows of shape {array.shape[1:]}, expected {self.row_shape}"
            )
        self._file.write(memoryview(array).cast("B"))
        self.written += len(array)

    def close(self) -> str:
        digest = self._file.close()
        if self.written != self.length:
            raise RuntimeError(f"{self.path.name}: wrote {self.written} of {self.length} entries")
        return digest
