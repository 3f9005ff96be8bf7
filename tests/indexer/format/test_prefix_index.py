"""Prefix index files: the streamed Flat file is FAISS's own, on-disk IVF lists survive a move,
and indexes open memory-mapped."""

from __future__ import annotations

import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
from bundle_inputs import gaussian_unit_rows

from indexer.format.index_plan import QUANTIZER_EF, PrefixPlan
from indexer.format.prefix_index import read_prefix_index
from indexer.format.prefix_writers import FlatFileWriter, OnDiskIvfWriter, flat_layout, train_index
from indexer.format.served_index import (
    apply_search_parameters,
    exact_storage,
    search_parameters,
)
from training.core.granularity import Granularity
from training.core.metrics import neighbour_recall


def plan(factory: str, length: int, ondisk: bool = False) -> PrefixPlan:
    return PrefixPlan(length, Granularity.OBJECT, "test", factory, ondisk, "test")


def test_streamed_flat_file_is_byte_for_byte_what_faiss_writes(tmp_path: Path):
    x = gaussian_unit_rows(70, 12, 0)
    writer = FlatFileWriter(plan("Flat", 12), tmp_path / "ours.faiss", 70, flat_layout(12))
    for start in (0, 30, 31):
        writer.add(x[start : {0: 30, 30: 31, 31: 70}[start]])
    digests = writer.close()
    reference = faiss.IndexFlatIP(12)
    reference.add(x)
    faiss.write_index(reference, str(tmp_path / "faiss.faiss"))
    assert (tmp_path / "ours.faiss").read_bytes() == (tmp_path / "faiss.faiss").read_bytes()
    assert next(iter(digests.values())) is not None
    index = read_prefix_index(tmp_path / "ours.faiss", "Flat", ondisk=False)
    assert index.ntotal == 70
    np.testing.assert_array_equal(exact_storage(index).reconstruct(33), x[33])


def test_on_disk_ivf_lists_are_found_after_the_folder_is_renamed(tmp_path: Path):
    x = gaussian_unit_rows(600, 8, 1)
    p = plan("IVF8,Flat", 8, ondisk=True)
    (tmp_path / "a").mkdir()
    writer = OnDiskIvfWriter(p, tmp_path / "a" / p.file, train_index(p, x), tmp_path)
    writer.add(x[:250])
    writer.add(x[250:])
    files = writer.close()
    assert sorted(f.name for f in files) == ["prefix_8.faiss", "prefix_8.ivfdata"]
    assert not list(tmp_path.glob("*.part-*"))
    shutil.move(tmp_path / "a", tmp_path / "b")
    index = read_prefix_index(tmp_path / "b" / p.file, p.factory, ondisk=True)
    faiss.extract_index_ivf(index).nprobe = 8
    _, rows = index.search(x[[0, 300, 599]], 1)
    assert rows[:, 0].tolist() == [0, 300, 599]  # ids are the global row positions
    assert exact_storage(index) is None


def test_a_graph_quantizer_is_trained_flat_and_kept_with_its_breadth(tmp_path: Path):
    """An IVF whose coarse quantizer is an HNSW graph (a large gallery's) finds the lists a
    flat quantizer finds; the graph's efSearch is written with the index, and a wider nprobe
    than it still probes that many lists."""
    x = gaussian_unit_rows(6000, 16, 3)
    p = plan("IVF64_HNSW32,SQ8", 16, ondisk=True)
    (tmp_path / "a").mkdir()
    writer = OnDiskIvfWriter(p, tmp_path / "a" / p.file, train_index(p, x), tmp_path)
    writer.add(x)
    writer.close()
    index = read_prefix_index(tmp_path / "a" / p.file, p.factory, ondisk=True)
    graph = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    assert isinstance(graph, faiss.IndexHNSW) and graph.hnsw.efSearch == QUANTIZER_EF
    centroids = faiss.IndexFlatIP(16)
    centroids.add(graph.reconstruct_n(0, 64))
    _, want = centroids.search(x[:100], 8)
    _, got = graph.search(x[:100], 8)
    assert neighbour_recall(got, want) >= 0.99
    _, wide = graph.search(x[:3], QUANTIZER_EF + 16)
    assert (wide >= 0).all()
    _, rows = index.search(x[:50], 1, params=search_parameters(index, "nprobe=64"))
    assert rows[:, 0].tolist() == list(range(50))


def test_search_parameters_are_per_call_and_reach_a_rerank_s_base():
    """A setting given per call changes that call only (the index keeps its own), and a row
    selector reaches the base index of a rerank, whose candidates are then reranked."""
    rows = gaussian_unit_rows(4000, 16, 7)
    index = faiss.index_factory(16, "IVF64,PQ4x8np,RFlat", faiss.METRIC_INNER_PRODUCT)
    index.train(rows)
    index.add(rows)
    apply_search_parameters(index, "nprobe=1,k_factor_rf=1")
    _, own = index.search(rows[:50], 10)
    params = search_parameters(index, "nprobe=64,k_factor_rf=16")
    _, wide = index.search(rows[:50], 10, params=params)
    exact = np.argsort(-(rows[:50] @ rows.T), axis=1)[:, :10]
    assert neighbour_recall(wide, exact) > neighbour_recall(own, exact) + 0.1
    np.testing.assert_array_equal(index.search(rows[:50], 10)[1], own)  # its own: unchanged
    assert faiss.extract_index_ivf(index).nprobe == 1
    allowed = faiss.IDSelectorRange(1000, 2000)
    _, found = index.search(rows[:5], 10, params=search_parameters(index, "nprobe=64", allowed))
    assert ((found >= 1000) & (found < 2000)).all()
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        search_parameters(index, "nprobe")
