"""The indexer's fixtures (helpers in bundle_inputs.py)."""

from __future__ import annotations

import sys

import faiss
import pytest
from bundle_inputs import Inputs, Parts, Run, make_inputs, make_parts


@pytest.fixture(scope="session")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    """600 rows in shards of 250, 250 and 100 (float16), D = 64, CEDAR k = 4."""
    return make_inputs(tmp_path_factory.mktemp("inputs"), 600, 250, clusters=8, seed=0)


@pytest.fixture(scope="session")
def clustered(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    """3,000 clustered rows in two shards: for approximate indexes."""
    return make_inputs(tmp_path_factory.mktemp("clustered"), 3000, 1500, clusters=30, seed=5)


@pytest.fixture(scope="session")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Parts:
    """Caches A (300 rows), B (120 other rows), AB and A_KEPT (A less every 7th row), D = 64:
    for adds and deletes against full builds of the same rows."""
    return make_parts(tmp_path_factory.mktemp("parts"))


@pytest.fixture(autouse=True)
def one_faiss_thread():
    """One OpenMP thread: the CPUs are shared, and small indexes gain nothing from more."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture
def strata_main(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """`strata ARGS` through service.cli.main in this process: (exit code, stdout, stderr)."""
    from service.cli import main

    def run(*args: str) -> Run:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["strata", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run
