"""The shard step's pooled memory: a buffer is reused only once no view of it is left."""

from __future__ import annotations

import gc

import numpy as np

from indexer.build.shard_step import BufferPool


def test_pooled_memory_comes_back_only_when_no_view_of_it_is_left():
    pool = BufferPool(keep=1)
    first = pool.take(4, 3)
    first[:] = 7.0
    address = first.ctypes.data
    column = first[1:, 2]  # a slice outlives the array it came from
    del first
    gc.collect()
    assert pool.free == 0
    other = pool.take(4, 3)  # the memory is still in use: a new buffer
    assert other.ctypes.data != address and column.tolist() == [7.0, 7.0, 7.0]
    del column
    gc.collect()
    assert pool.free == 1
    again = pool.take(4, 3)
    assert again.ctypes.data == address and again.shape == (4, 3) and again.dtype == np.float32
    assert pool.free == 0
    assert pool.take(2, 3).ctypes.data != address  # another size: its own buffer
    del other, again
    gc.collect()
    assert pool.free == 1  # at most `keep` free buffers
