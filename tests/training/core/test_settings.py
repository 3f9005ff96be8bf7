"""The data folder: the repository's own data/ first, ../shared/data only as a fallback, and
STRATA_DATA_DIR over both."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.cli import corpus_location
from training.core.settings import StrataSettings


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory inside `tmp_path` (so ../shared is tmp_path/shared), no variable."""
    root = tmp_path / "checkout"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.delenv("STRATA_DATA_DIR", raising=False)
    return root


def test_the_data_folder_is_the_checkouts_own_first(checkout: Path) -> None:
    (checkout / "data").mkdir()
    (checkout.parent / "shared" / "data").mkdir(parents=True)
    assert StrataSettings().data_dir == Path("data")


def test_the_shared_folder_beside_the_checkout_is_a_fallback(checkout: Path) -> None:
    (checkout.parent / "shared" / "data").mkdir(parents=True)
    assert StrataSettings().data_dir == Path("../shared/data")


def test_without_either_the_data_folder_is_data(checkout: Path) -> None:
    assert StrataSettings().data_dir == Path("data")


def test_the_variable_wins(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (checkout / "data").mkdir()
    monkeypatch.setenv("STRATA_DATA_DIR", "/srv/datasets")
    assert StrataSettings().data_dir == Path("/srv/datasets")


def test_flickr8k_is_read_from_the_data_folder_unless_a_path_is_given(checkout: Path) -> None:
    (checkout / "data").mkdir()
    assert corpus_location("flickr8k", None) == Path("data/flickr8k")
    assert corpus_location("flickr8k", Path("elsewhere")) == Path("elsewhere")
    assert corpus_location("compositional", None) is None
