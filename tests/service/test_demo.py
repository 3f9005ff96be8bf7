"""The main job on the embedded default: real MiniLM over captions, a cache, sensible neighbours."""

from __future__ import annotations

from pathlib import Path

from service.demo import run_demo
from training.embedding.cache import EmbeddingCache
from training.settings import StrataSettings

CAPTIONS = {
    "beach.jpg": ["A black dog runs along the sandy beach .", "A dog sprints by the ocean waves ."],
    "shirt.jpg": ["A little boy in a red shirt smiles .", "A child wearing red plays outside ."],
    "bikes.jpg": ["Several cyclists race down a road .", "People ride their bikes in a group ."],
    "kitchen.jpg": ["A woman cooks dinner in a kitchen .", "Someone is chopping vegetables ."],
}


def test_demo_embeds_flickr_style_captions_and_finds_neighbours(tmp_path: Path):
    flickr = tmp_path / "data" / "flickr8k"
    flickr.mkdir(parents=True)
    lines = [f"{img}#{i}\t{c}" for img, caps in CAPTIONS.items() for i, c in enumerate(caps)]
    (flickr / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    settings = StrataSettings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs", device="cpu")

    result = run_demo(settings, progress=False)

    assert result.corpus == "flickr8k" and result.summary.rows == 8
    cache = EmbeddingCache.open(tmp_path / "runs" / "demo" / "cache-flickr8k-minilm")
    assert cache.manifest.encoder == "minilm" and cache.rows == 8
    top = {query: hits[0][1] for query, hits in result.neighbours.items()}
    assert top["a dog playing in the sea"] in CAPTIONS["beach.jpg"]
    assert top["a child in a red shirt"] in CAPTIONS["shirt.jpg"]
    assert top["people riding bicycles"] in CAPTIONS["bikes.jpg"]
    again = run_demo(settings, progress=False)
    assert again.summary.already_complete
