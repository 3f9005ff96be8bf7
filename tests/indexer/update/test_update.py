"""`strata index add | delete`: a new version equal to a full build of the same rows.

Flat indexes, postings and ids are compared file for file (sha256) where the full build cuts
the same shards, else row for row (to float rounding), and by search at every prefix; HNSW and
IVF, whose structure is not a rebuild's, by what they return: exhaustive IVF search equals
exact search, HNSW recall is high, deleted rows never come back, and the codes an IVF kept give
the same hits as before, renumbered. In the layout of a file per prefix, whose index files an
update edits one by one (the store's adds and deletes: tests/indexer/format/test_store.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
from bundle_inputs import Parts, assert_one_line_error, write_cache

from indexer.format.bundle import Bundle
from indexer.format.manifest import MANIFEST, read_current
from indexer.format.prefixes import exact_top_k
from indexer.update.row_changes import UpdateError
from indexer.update.rows import AddConfig, DeleteConfig, add_rows, delete_rows, replan_notes
from indexer.verify.check import verify_bundle
from indexer.verify.faults import VersionRefusedError
from tests.tamper import damages
from training.core.cache import EmbeddingCache
from training.core.metrics import neighbour_recall, prefix_vectors

APPROXIMATE = (
    "object=hnsw",
    "relation=ivfpq-refine",
    "caption=ivfpq-ondisk",
    "full=IVF{nlist},Flat",
)


def checksums(bundle: Bundle) -> dict[str, str]:
    return {name: record.sha256 for name, record in bundle.manifest.files.items()}


def assert_same_search(ours: Bundle, rebuilt: Bundle, queries: np.ndarray, atol=0.0) -> None:
    for length in rebuilt.prefix_lengths:
        scores, rows = ours.search(queries, length, 10)
        expected_scores, expected_rows = rebuilt.search(queries, length, 10)
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=atol)


def assert_same_rows(ours: Bundle, rebuilt: Bundle) -> None:
    """Every stored vector and posting of a full build, up to float rounding: a build whose
    shards are cut differently rotates each row in a matmul of another size, which BLAS may
    round differently in the last bit."""
    assert ours.rows == rebuilt.rows
    for length in rebuilt.prefix_lengths:
        ntotal = rebuilt.rows
        np.testing.assert_allclose(
            ours.index(length).reconstruct_n(0, ntotal),
            rebuilt.index(length).reconstruct_n(0, ntotal),
            rtol=0,
            atol=1e-5,
        )
    mine, theirs = ours._postings, rebuilt._postings
    np.testing.assert_array_equal(mine.indptr, theirs.indptr)
    np.testing.assert_array_equal(mine.rows, theirs.rows)
    np.testing.assert_allclose(mine.values, theirs.values, rtol=0, atol=1e-5)
    files = ("ids.parquet", *(f for f in checksums(rebuilt) if f.startswith("artifacts/")))
    assert {f: checksums(ours)[f] for f in files} == {f: checksums(rebuilt)[f] for f in files}


def gallery(parts: Parts, cache: str) -> np.ndarray:
    return EmbeddingCache.open(parts.caches[cache]).embeddings("image")


def recorded_funnels(bundle: Bundle) -> dict:
    """The funnels a version recorded at build time, less the seconds they took."""
    assert bundle.manifest.funnels is not None
    return {k: v for k, v in bundle.manifest.funnels.items() if k != "seconds"}


def test_add_equals_a_full_build_file_for_file(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("A", out, store="none")
    summary = add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    assert (summary.name, summary.base, summary.rows, summary.changed_rows) == (
        "v000002",
        "v000001",
        420,
        120,
    )
    assert read_current(out) == "v000002"
    assert summary.actions["prefix_4.faiss"].startswith("copied + extended")
    assert summary.actions["postings_*.npy"].startswith("merged")
    ours = Bundle.open(out)
    rebuilt = Bundle.open(parts.build("AB", tmp_path / "rebuilt", store="none").path)
    # every index, postings and ids file (and the artifact copies) are a full build's bytes
    assert checksums(ours) == checksums(rebuilt)
    assert recorded_funnels(ours) == recorded_funnels(rebuilt)  # of the new rows, not the base's
    x = gallery(parts, "AB")
    assert_same_search(ours, rebuilt, x[::13])
    assert ours.ids([0, 299, 300, 419]) == ["a-0-0", "a-1-149", "b-0-0", "b-1-39"]
    source = ours.manifest.source
    assert source["operation"] == "add" and source["cache_first_row"] == 300
    assert source["base"]["name"] == "v000001" and source["base"]["rows"] == 300
    assert [step["operation"] for step in source["lineage"]] == ["build", "add"]
    report = verify_bundle(ours.path, sample=16)  # sampled from the added rows, vs cache B
    assert report.faults == [] and report.sampled_rows == 16


def test_delete_equals_a_full_build_of_the_kept_rows(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("AB", out, store="none")
    ids = (*parts.b_ids, *parts.dropped)
    summary = delete_rows(DeleteConfig(bundles=out, ids=ids, keep=1))
    assert summary.rows == 300 - len(parts.dropped) and summary.changed_rows == len(ids)
    assert summary.removed_versions == ["v000001"]
    assert summary.actions["prefix_64.faiss"].startswith("copied: the kept stored rows")
    ours = Bundle.open(out)
    rebuilt = Bundle.open(parts.build("A_KEPT", tmp_path / "rebuilt", store="none").path)
    assert_same_rows(ours, rebuilt)
    assert recorded_funnels(ours) == recorded_funnels(rebuilt)
    assert_same_search(ours, rebuilt, gallery(parts, "A_KEPT")[::11], atol=1e-5)
    assert ours.manifest.source["operation"] == "delete"
    assert ours.manifest.source["deleted_rows"] == len(ids)
    report = verify_bundle(ours.path, sample=16)
    assert report.faults == [] and "map to no single cache (delete)" in report.notes[0]


def test_add_then_delete_returns_to_the_first_build(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    first = parts.build("A", out, store="none")
    add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    last = delete_rows(DeleteConfig(bundles=out, ids=tuple(parts.b_ids)))
    assert last.name == "v000003"
    assert checksums(Bundle.open(out)) == checksums(Bundle.open(first.path))


def exhaustive(bundle: Bundle, length: int) -> faiss.Index:
    index = bundle.index(length).faiss
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = ivf.nlist
    return index


def test_approximate_indexes_take_adds_and_deletes(parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("A", out, index_types=APPROXIMATE, store="none")
    added = add_rows(AddConfig(bundles=out, cache=parts.caches["B"], progress=False))
    assert "HNSW graph" in added.actions["prefix_4.faiss"]
    assert ".ivfdata" in added.actions["prefix_32.faiss"]
    bundle = Bundle.open(out)
    assert {p.factory for p in bundle.manifest.prefixes} >= {"HNSW32,Flat", "IVF7,Flat"}
    x = gallery(parts, "AB")
    z = bundle.rotate(x)
    queries = np.arange(0, 420, 7)
    rebuilt = Bundle.open(parts.build("AB", tmp_path / "rebuilt", store="none").path)
    for length in (4, 64):
        p = prefix_vectors(z, length)
        exact_scores, exact_rows = exact_top_k(p, p[queries], 10)
        scores, rows = exhaustive(bundle, length).search(p[queries], 10)
        if length == 64:  # IVF, every list probed: exact, as the rebuilt Flat index
            np.testing.assert_array_equal(rows, rebuilt.search(x[queries], 64, 10)[1])
            np.testing.assert_allclose(scores, exact_scores, atol=1e-5)
        assert neighbour_recall(rows, exact_rows) >= 0.95
    for length in (16, 32):  # IVF-PQ: every row, added or not, finds itself
        p = prefix_vectors(z, length)
        rows = exhaustive(bundle, length).search(p[queries], 10)[1]
        assert np.mean([q in r for q, r in zip(queries, rows, strict=True)]) >= 0.95

    before = {n: exhaustive(bundle, n).search(prefix_vectors(z, n)[queries], 30) for n in (32, 64)}
    deleted = delete_rows(DeleteConfig(bundles=out, ids=(*parts.b_ids, *parts.dropped)))
    assert deleted.actions["prefix_4.faiss"].startswith("rebuilt from its stored vectors")
    assert "refine rows removed" in deleted.actions["prefix_16.faiss"]
    after = Bundle.open(out)
    kept = np.array([i not in set(deleted_ids(parts)) for i in bundle.ids(np.arange(420))])
    new_row = np.where(kept, np.cumsum(kept) - 1, -1)
    assert after.rows == kept.sum() and verify_bundle(after.path, sample=8).faults == []
    zk = z[kept]
    for length in (32, 64):  # the kept codes give the old hits, deleted ones dropped
        old_rows = before[length][1]
        scores, rows = exhaustive(after, length).search(prefix_vectors(z, length)[queries], 10)
        for q in range(len(queries)):
            survivors = old_rows[q][kept[old_rows[q]]][:10]
            np.testing.assert_array_equal(rows[q], new_row[survivors])
    own = np.arange(0, len(zk), 9)
    for length in after.prefix_lengths:  # every kept row still finds itself
        rows = exhaustive(after, length).search(prefix_vectors(zk, length)[own], 10)[1]
        assert ((rows >= 0) & (rows < len(zk))).all()
        assert np.mean([q in r for q, r in zip(own, rows, strict=True)]) >= 0.95, length


def deleted_ids(parts: Parts) -> list[str]:
    return [*parts.b_ids, *parts.dropped]


# --- refusals -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built_a(parts: Parts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("refusals") / "bundles"
    parts.build("A", out, store="none")
    return out


def assert_unchanged(out: Path) -> None:
    assert read_current(out) == "v000001"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "CURRENT",
        "v000001",
    ]


def test_an_add_refuses_ids_it_holds_and_caches_that_differ(
    parts: Parts, built_a: Path, tmp_path: Path
):
    with pytest.raises(UpdateError, match=r"258 ids of the cache .* are already in v000001: "):
        add_rows(AddConfig(bundles=built_a, cache=parts.caches["A_KEPT"], progress=False))
    x = gallery(parts, "B")[:3]
    twice = write_cache(tmp_path / "twice", [(x, ["n-1", "n-2", "n-1"])])
    with pytest.raises(UpdateError, match=r"repeats ids: 'n-1'"):
        add_rows(AddConfig(bundles=built_a, cache=twice, progress=False))
    other = write_cache(tmp_path / "other", [(x, ["n-1", "n-2", "n-3"])], encoder="open_clip:x")
    with pytest.raises(UpdateError, match="encoder mismatch: v000001 was built from 'synthetic'"):
        add_rows(AddConfig(bundles=built_a, cache=other, progress=False))
    with pytest.raises(UpdateError, match="no published bundle"):
        add_rows(AddConfig(bundles=tmp_path, cache=parts.caches["B"], progress=False))
    assert_unchanged(built_a)


def test_add_and_delete_refuse_a_base_that_does_not_verify(
    strata_main, parts: Parts, built_a: Path, tmp_path: Path
):
    """A flipped byte in the published version: `index add` and `index delete` refuse it in one
    line naming the file, as `index publish` and a hot swap do, and write nothing."""
    out = Path(shutil.copytree(built_a, tmp_path / "bundles"))
    damages(out / "v000001")["flipped byte: prefix index"](out / "v000001")
    cache = str(parts.caches["B"])
    added = strata_main("index", "add", "--bundles", str(out), "--cache", cache, "--no-progress")
    assert_one_line_error(added, "v000001 does not verify, refused: ", "checksum mismatch")
    deleted = strata_main("index", "delete", "--bundles", str(out), "--id", "a-0-0")
    assert_one_line_error(deleted, "v000001 does not verify, refused: ", "checksum mismatch")
    with pytest.raises(VersionRefusedError, match=r"\.faiss: checksum mismatch"):
        delete_rows(DeleteConfig(bundles=out, ids=("a-0-0",)))
    assert_unchanged(out)


def test_the_summary_notes_where_a_build_would_choose_another_index(built_a: Path):
    bundle = Bundle.open(built_a)
    assert replan_notes(bundle, 420) == []
    bundle.manifest.build["memory_budget"] = 1000  # as if built under a tiny budget
    notes = replan_notes(bundle, 20_000)
    assert notes[0] == (
        "prefix 4 keeps Flat; a build of 20000 rows would choose IVF512,PQ1x8np (on disk) "
        "— rebuild to re-plan"
    )


# --- the command line ---------------------------------------------------------------------------


def test_add_and_delete_on_the_command_line(strata_main, parts: Parts, tmp_path: Path):
    out = tmp_path / "bundles"
    parts.build("A", out, store="none")
    added = strata_main(
        "index", "add", "--bundles", str(out), "--cache", str(parts.caches["B"]), "--no-progress"
    )
    assert added.returncode == 0, added.stderr
    lines = added.stdout.splitlines()
    assert lines[0] == f"bundle       {out / 'v000002'} (now CURRENT; made from v000001)"
    assert lines[1] == f"rows         420 = 300 + 120 added from {parts.caches['B']}"
    assert any(
        line.startswith("  prefix_64.faiss") and "copied + extended" in line for line in lines
    )
    assert lines[-1].startswith("on disk ")
    info = strata_main("index", "info", str(out)).stdout.splitlines()
    assert (
        info[2]
        == f"source       v000001 + rows 300.. from {parts.caches['B'].resolve()} (index add)"
    )
    id_file = tmp_path / "ids.txt"
    id_file.write_text("\n".join(parts.b_ids[:5]) + "\n\n")
    deleted = strata_main(
        "index",
        "delete",
        "--bundles",
        str(out),
        "--ids",
        str(id_file),
        "--id",
        "b-1-0",
        "--id",
        "nobody",
        "--missing-ok",
        "--keep",
        "1",
    )
    assert deleted.returncode == 0, deleted.stderr
    lines = deleted.stdout.splitlines()
    assert lines[1] == "rows         414 = 420 − 6 deleted"
    assert lines[2] == "not found    nobody (--missing-ok)"
    assert "removed      v000001, v000002 (--keep)" in lines
    info = strata_main("index", "info", str(out)).stdout.splitlines()
    assert info[2] == "source       v000002 − 6 rows (index delete)"
    refused = strata_main("index", "delete", "--bundles", str(out), "--id", "a-0-0", "--id", "x")
    assert_one_line_error(refused, "1 of the 2 ids to delete are not in v000003: 'x'")
    refused = strata_main("index", "add", "--bundles", str(out), "--cache", str(parts.caches["A"]))
    assert_one_line_error(refused, "300 ids of the cache", "are already in v000003")
    missing = strata_main("index", "delete", "--bundles", str(out), "--ids", str(tmp_path / "no"))
    assert_one_line_error(missing, "cannot read --ids")
    assert json.loads((out / "v000003" / MANIFEST).read_text())["rows"] == 414
