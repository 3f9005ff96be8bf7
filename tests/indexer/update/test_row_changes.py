"""What an add or a delete may change: the renumbering, and the refusals that name the ids."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from indexer.update.row_changes import (
    UpdateError,
    check_new_ids,
    read_id_file,
    rows_to_delete,
    shown,
)


def test_rows_to_delete_renumbers_and_names_unknown_ids():
    ids = pa.array(["a", "b", "c", "d", "e"])
    new_row, missing = rows_to_delete(ids, ["d", "b", "b"], False, "v1")
    assert new_row.tolist() == [0, -1, 1, -1, 2] and missing == []
    with pytest.raises(UpdateError, match=r"2 of the 3 ids to delete are not in v1: 'x', 'y' "):
        rows_to_delete(ids, ["a", "y", "x"], False, "v1")
    new_row, missing = rows_to_delete(ids, ["a", "y", "x"], True, "v1")
    assert new_row.tolist() == [-1, 0, 1, 2, 3] and missing == ["x", "y"]
    with pytest.raises(UpdateError, match="none of the 1 ids are in v1: nothing to delete"):
        rows_to_delete(ids, ["x"], True, "v1")
    with pytest.raises(UpdateError, match="every row of v1 would leave an empty bundle"):
        rows_to_delete(ids, list("abcde"), False, "v1")


def test_new_ids_must_be_present_unique_and_not_in_the_bundle():
    base = pa.array(["a", "b"])
    check_new_ids(base, pa.array(["c", "d"]), "v1", Path("cache"))
    with pytest.raises(UpdateError, match="1 rows of the cache cache have no id"):
        check_new_ids(base, pa.array(["c", None]), "v1", Path("cache"))
    with pytest.raises(UpdateError, match="the cache cache repeats ids: 'c'"):
        check_new_ids(base, pa.array(["c", "c", "d"]), "v1", Path("cache"))
    with pytest.raises(UpdateError, match="1 ids of the cache cache are already in v1: 'b' "):
        check_new_ids(base, pa.array(["b", "d"]), "v1", Path("cache"))


def test_messages_name_a_few_ids_and_count_the_rest():
    assert shown(["a", "b"]) == "'a', 'b'"
    assert shown([str(i) for i in range(7)]) == "'0', '1', '2', '3', '4', … (7 in all)"


def test_an_id_file_is_one_id_a_line(tmp_path: Path):
    (tmp_path / "ids.txt").write_text(" a \n\nb\n  \n")
    assert read_id_file(tmp_path / "ids.txt") == ["a", "b"]
    with pytest.raises(UpdateError, match=r"cannot read --ids .*missing\.txt"):
        read_id_file(tmp_path / "missing.txt")
