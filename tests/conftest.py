"""Shared fixtures: small encoders and data made on the spot (the suite never reads the data
folder, docs/reference/settings.md#the-data-folder)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# what a job caches under the runs directory (embedded views and queries) goes to a folder of
# this run, never into the checkout's runs/ (subprocesses inherit it)
os.environ["STRATA_RUNS_DIR"] = tempfile.mkdtemp(prefix="strata-test-runs-")
atexit.register(shutil.rmtree, os.environ["STRATA_RUNS_DIR"], True)

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="session")
def tiny_clip_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An open_clip architecture small enough to run both towers in milliseconds."""
    path = tmp_path_factory.mktemp("configs") / "tiny-clip.json"
    path.write_text(json.dumps(TINY_CLIP))
    return path


@pytest.fixture(scope="session")
def tiny_clip(tiny_clip_config: Path):
    from training.core.encoders import load_encoder

    return load_encoder(f"open_clip:{tiny_clip_config}", device="cpu", batch_size=16)


@pytest.fixture(scope="session")
def minilm():
    from training.core.encoders import load_encoder

    return load_encoder("minilm", device="cpu", batch_size=32)


def _run_strata(*args: str, check: bool = False, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "service", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **kwargs,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"strata {' '.join(args)} failed:\n{result.stderr}")
    return result


def _write_png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def _serve_process(*args: str, log_level: str = "WARNING") -> subprocess.Popen[str]:
    """`strata serve ARGS` started as a user would, its output piped as text, unbuffered (its
    first line says where it serves); the caller stops it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STRATA_LOG_LEVEL": log_level}
    return subprocess.Popen(
        [sys.executable, "-m", "service", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture
def serve_process():
    """Starts the real server in a subprocess (`_serve_process`)."""
    return _serve_process


@pytest.fixture
def strata():
    """The real command line, in a subprocess, as a user would run it."""
    return _run_strata


@pytest.fixture
def write_png():
    """Writes a small solid-colour PNG and returns its path."""
    return _write_png
