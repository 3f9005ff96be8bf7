"""docs/tutorials/own-images.md runs as written, by both ways in (embed, import).

Every `strata` command of the page's bash blocks runs in order in a folder of the test's own,
through the real command line (`service.cli.main`, in this process; `strata serve` as a child
process). The test makes what a user would bring: the photographs (PNG files under the page's
names in data/coco-mini/images/), a small Flickr8k-format captioned corpus in the data folder,
and clip-retrieval's output folder (clip-out/, from the photographs' vectors). Its changes to the
commands, so that they run in seconds: `$ENCODER` is a tiny open_clip architecture with random
weights (256-d), training runs 2 epochs, and the server takes free ports.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.servers import free_port
from training.core.cache import EmbeddingCache
from training.core.encoders import EncoderSpec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "tutorials" / "own-images.md"
TINY_CLIP = {
    "embed_dim": 256,  # CEDAR's sparsity range reaches 128 coordinates
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
SUBJECTS = ("dog", "cat", "man", "woman", "horse", "bird")
COLOURS = ("red", "black", "white", "brown", "blue")
PLACES = ("beach", "park", "street", "snow", "field")
READY_S = 120.0


def page_commands(text: str) -> list[str]:
    """The `strata` command lines of the page's bash blocks, in order (continuations joined,
    comments and the ENCODER assignment left out)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("strata "):
                commands.append(line)
    return commands


def write_photographs(folder: Path, names: list[str]) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    draw = np.random.default_rng(0)
    for name in names:
        pixels = draw.integers(0, 255, size=(24, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / name, format="PNG")  # any suffix decodes


def write_flickr8k(folder: Path, images: int = 30) -> None:
    """Flickr8k's token file and split files, with made-up captions."""
    folder.mkdir(parents=True)
    names = [f"{i:05d}_photo.jpg" for i in range(images)]
    lines = []
    for n, image in enumerate(names):
        subject, colour = SUBJECTS[n % len(SUBJECTS)], COLOURS[n % len(COLOURS)]
        for k in range(5):
            place = PLACES[(n + k) % len(PLACES)]
            forms = (
                f"A {colour} {subject} runs on the {place} .",
                f"A {subject} with a {colour} ball plays in the {place} .",
                f"The {colour} {subject} sits .",
            )
            lines.append(f"{image}#{k}\t{forms[k % len(forms)]}")
    (folder / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    splits = {"train": names[:20], "dev": names[20:25], "test": names[25:]}
    for split, chosen in splits.items():
        (folder / f"Flickr_8k.{split}Images.txt").write_text("\n".join(chosen) + "\n")


def write_clip_out(cache_dir: Path, out: Path) -> None:
    """clip-retrieval's output for the photographs: img_emb_0.npy, metadata_0.parquet."""
    cache = EmbeddingCache.open(cache_dir)
    (out / "img_emb").mkdir(parents=True)
    (out / "metadata").mkdir()
    np.save(out / "img_emb" / "img_emb_0.npy", cache.embeddings("image").astype(np.float16))
    paths = cache.metadata().column("image_path").to_pylist()
    pq.write_table(pa.table({"image_path": paths}), out / "metadata" / "metadata_0.parquet")


def strata(args: list[str], capsys) -> str:
    """`strata ARGS` through the command line's own entry point; its stdout."""
    from service.cli import main

    sys.argv = ["strata", *args]
    with pytest.raises(SystemExit) as ended:
        main()
    out, err = capsys.readouterr()
    assert ended.value.code == 0, (args, out, err[-3000:])
    return out


def serve(args: list[str], folder: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "service", *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines, deadline = [], time.monotonic() + READY_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C stops" in line:
            process.stdout.readline()  # the http line follows
            return process, "".join(lines)
    process.kill()
    pytest.fail(f"strata serve did not become ready: {''.join(lines)}")


def test_the_tutorial_runs_as_written(tmp_path: Path, monkeypatch, capsys):
    text = PAGE.read_text()
    commands = page_commands(text)
    assert any(c.startswith("strata embed run") for c in commands)
    assert any(c.startswith("strata embed import") for c in commands)
    config = tmp_path / "tiny-clip.json"
    config.write_text(json.dumps(TINY_CLIP))
    encoder = EncoderSpec.parse(f"open_clip:{config}@random:0").id  # as the cache records it
    photos = sorted(
        set(re.findall(r"images/(\d+\.jpg)", text)) | {f"{i:012d}.jpg" for i in (1, 2, 3, 4)}
    )
    write_photographs(tmp_path / "data" / "coco-mini" / "images", photos)
    write_flickr8k(tmp_path / "data" / "flickr8k")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "STRATA_DATA_DIR": str(tmp_path / "data"),
        "STRATA_DEVICE": "cpu",
        "STRATA_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    for name in ("STRATA_DATA_DIR", "STRATA_DEVICE", "STRATA_LOG_LEVEL", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("STRATA_RUNS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    port, server = free_port(), None
    printed: dict[str, str] = {}
    try:
        for command in commands:
            args = shlex.split(command.replace("$ENCODER", encoder))[1:]
            if args[:2] == ["embed", "import"] and not (tmp_path / "clip-out").exists():
                write_clip_out(tmp_path / "runs" / "photos", tmp_path / "clip-out")
            if args[0] == "train":
                args += ["--epochs", "2"]
            if args[0] == "serve":
                http = args.index("--http-port") + 1
                args[http] = str(free_port())
                server, printed[command] = serve([*args, "--port", str(port)], tmp_path, env)
                continue
            if args[0] == "search":
                args += ["--target", f"127.0.0.1:{port}"]
            printed[command] = strata(args, capsys)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    served = next(out for c, out in printed.items() if c.startswith("strata serve"))
    assert "serving runs/bundles/v000001 (" in served and f"127.0.0.1:{port}" in served
    searches = [out for c, out in printed.items() if c.startswith("strata search")]
    assert len(searches) == 2
    for out in searches:
        hits = [line for line in out.splitlines() if re.match(r"^\d+\s+[-\d.]+\s+\d+\.jpg", line)]
        assert len(hits) == 3, out
    assert searches[1].startswith("granularity  full")  # an image query: the full vector
    imported = EmbeddingCache.open(tmp_path / "runs" / "photos-imported")
    assert imported.manifest.encoder == encoder and imported.rows == len(photos)
    assert (tmp_path / "runs" / "bundles-imported" / "CURRENT").is_file()
    assert EmbeddingCache.open(tmp_path / "runs" / "photos-mine").manifest.encoder == "my-clip"
