"""The pairs of `strata upgrade`: shared ids paired in a seeded order, some held out, none both."""

from __future__ import annotations

import numpy as np

from training.cosae.upgrade import shared_rows


def test_pairs_join_the_same_ids_and_held_out_ones_are_never_paired():
    ids_a = np.array([f"id-{i}" for i in range(100)], dtype=object)
    ids_b = np.array([f"id-{i}" for i in range(50, 150)][::-1], dtype=object)  # 50 shared
    split = shared_rows(ids_a, ids_b, fraction=0.2, seed=3)
    assert split is not None and split.shared == 50
    assert len(split.pair_a) == 20 and len(split.held_a) == 10  # ⌈0.2 · 100⌉; 50 // 5
    assert (ids_a[split.pair_a] == ids_b[split.pair_b]).all()
    assert (ids_a[split.held_a] == ids_b[split.held_b]).all()
    assert not set(split.pair_a) & set(split.held_a)
    again = shared_rows(ids_a, ids_b, fraction=0.2, seed=3)
    assert again is not None and (again.pair_a == split.pair_a).all()  # seeded


def test_pairs_are_capped_and_put_first():
    ids_a = np.array(["a", "b", "c", "d", "e"], dtype=object)
    ids_b = np.array(["e", "d", "x"], dtype=object)
    split = shared_rows(ids_a, ids_b, fraction=1.0, seed=0)
    assert split is not None and len(split.pair_a) == 2 and len(split.held_a) == 0
    x_a, x_b = np.arange(5.0)[:, None], np.arange(3.0)[:, None]
    target, source = split.paired_first(x_a, x_b)
    assert target[:2, 0].tolist() == split.pair_a.tolist() and len(target) == 5
    assert source[:2, 0].tolist() == split.pair_b.tolist() and len(source) == 3
    assert shared_rows(ids_a, np.array(["z"], dtype=object), 0.5, 0) is None
