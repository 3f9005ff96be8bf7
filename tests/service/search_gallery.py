"""Real bundles for the service tests, made on the spot by the real pipeline.

The text bundle: compositional scenes embedded with MiniLM by the embed job; as the GraSP-VL
artifact a stand-in with the same format (the principal axes of the gallery, method
"grasp-vl": its leading coordinates carry the subject noun, which is what object search
needs, at no training cost — trained GraSP-VL is tested in tests/training); a CEDAR artifact
trained for two epochs and named from the captions' vocabulary, with two entries of its catalog
written for the tests (`write_test_concepts`: whatever the two epochs learned, the catalog holds
a named concept with known runner-ups and an unnamed one); then `indexer.build.full`.

The image bundle: solid-colour PNGs with captions, embedded (both towers) with a random-weight
tiny open_clip, an identity GraSP-VL artifact and a random CEDAR artifact.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from service.engine.descriptions import code_names
from service.engine.explain import row_concepts
from service.engine.search import SearchEngine
from service.results import SearchQuery
from training.cedar.catalog import (
    CatalogEntry,
    build_catalog,
    catalog_json,
    name_concepts,
    vocabulary_from_texts,
)
from training.cedar.data import load_split_rows
from training.cedar.readout.artifact import readout_record, readout_tensors
from training.cedar.readout.vocabulary import (
    VocabularyReadout,
    readout_input,
    text_directions,
    with_zero_shot,
)
from training.cedar.train import CedarConfig, train_cedar
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.encoders import Encoder
from training.core.granularity import default_contract
from training.core.rotations import pca_rotation
from training.corpora import open_corpus
from training.corpora.compositional import CompositionalCorpus
from training.embedding.job import EmbedConfig, embed_corpus
from training.synthetic import random_cedar_artifact

SCENES = 300
CEDAR_K = 8
CEDAR = CedarConfig(
    epochs=2, k=CEDAR_K, k_min=4, k_max=16, batch_size=64, curriculum_epochs=1, patience=2
)
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 200, 40),
    "blue": (30, 40, 220),
    "yellow": (230, 220, 30),
    "purple": (140, 30, 160),
    "orange": (240, 140, 20),
}
# The catalog entries written for the tests (words in no caption, so in no other concept's name
# or runner-ups): the busiest concept is named LANTERN with these runner-ups, the next busiest
# is left unnamed.
LANTERN = "lantern"
LANTERN_RUNNER_UPS = (("harbour", 0.41), ("lighthouse", 0.38), ("compass", 0.33))
LANTERN_PRECISION = 0.625
UNNAMED_PRECISION = 0.125
# The text bundle's described word: the busiest concept named by a caption word is held to this
# held-out precision (every concept of that name), so that descriptions have a phrase to say;
# the catalog measured on the fixture's 300 scenes has no other concept at the service's DESCRIBED
DESCRIBED_PRECISION = 0.9


# The word concept written for the tests: a readout word active on exactly the BEACON_ROWS rows
# nearest (centred cosine) to the first row, whatever the training learned.
BEACON = "beacon"
BEACON_ROWS = 24
BEACON_PRECISION = 0.75
# The word bundle's precision floor: BEACON and LANTERN hold, the unnamed concept and every
# concept with no measured precision do not
WORD_FLOOR = 0.5
# The word bundle's zero-shot cut in standard units: a phrase outside its catalog allows the rows
# whose centred cosine with the phrase lies OPEN_Z standard deviations above its mean
OPEN_Z = 1.5
# The many-words bundle's words beyond BEACON: its first row holds CEDAR_K axes and 41 words
MANY_WORDS = 40
# The stated bundle's words beyond BEACON: enough for every row's hub value to be read
STATED_WORDS = 12


def beacon_readout(
    x: np.ndarray, mean: np.ndarray, extra: int = 0, encoder: Encoder | None = None
) -> VocabularyReadout:
    """A one-word readout: margin = cos(x − b, x₀ − b) − t, t midway between the BEACON_ROWS-th
    and the next cosine, so that exactly those rows are active (the premise of the word-concept
    tests). With `extra`, EXTRA_WORDS[j] (the same direction) is active on the BEACON_ROWS + 2j + 2
    nearest rows: the first row then carries 1 + extra word concepts beside its k axes. With an
    `encoder`, the readout keeps its words' text directions (an index build then measures the
    open vocabulary's state)."""
    features = readout_input(x, "dense", np.eye(x.shape[1]), mean, x.shape[1])
    direction = features[0]
    cosines = np.sort(features @ direction)[::-1]
    active = [BEACON_ROWS + 2 * j for j in range(extra + 1)]
    cuts = np.array([(cosines[n - 1] + cosines[n]) / 2 for n in active], dtype=np.float32)
    words = [BEACON, *beacon_words(extra)]
    return VocabularyReadout(
        words=words,
        classes=["noun"] * len(words),
        weight=np.repeat(direction[None, :], len(words), axis=0).astype(np.float32),
        offset=-cuts,
        threshold=cuts,
        own_threshold=np.ones(len(words), dtype=bool),
        precision=[BEACON_PRECISION] * len(words),
        recall=[0.5] * len(words),
        support=active,
        frequency=[n / len(x) for n in active],
        text=None if encoder is None else text_directions(encoder.encode_text(words), mean),
    )


def beacon_words(count: int) -> list[str]:
    """Words in no caption ("beaconaa", "beaconab", …): the many-words bundle's extra readout."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [f"{BEACON}{letters[j // 26]}{letters[j % 26]}" for j in range(count)]


def build_text_bundle(
    root: Path,
    encoder: Encoder,
    scenes: int = SCENES,
    seed: int = 3,
    words: bool = False,
    floor: float | None = None,
    extra_words: int = 0,
    text: bool = False,
    zero_shot_words: Sequence[str] = (),
) -> Path:
    """BUNDLES folder of a MiniLM bundle over `scenes` compositional captions; with `words`, its
    CEDAR artifact carries the one-word readout `beacon_readout` (and `extra_words` more words
    on the same rows). Its precision floor is `floor` (None: no floor, every concept shown, as
    the mechanics of concepts are tested). With `text`, the readout keeps its words' text
    directions, and the build measures the open vocabulary's state (indexer/vocabulary/);
    `zero_shot_words` are added to it as zero-shot words (their text directions, cut 0)."""
    cache = root / "cache"
    embed_corpus(
        CompositionalCorpus(scenes=scenes, seed=seed),
        encoder,
        cache,
        EmbedConfig(dtype="float32", progress=False),
    )
    data = load_split_rows(cache)
    x = data.embeddings
    dim = x.shape[1]
    mean = x.mean(axis=0)
    TransformArtifact(
        "grasp-vl", pca_rotation(x - mean), mean, default_contract(dim), encoder=encoder.id
    ).save(root / "grasp")

    train, val = data.rows("train"), data.rows("val")
    result = train_cedar(x[train], x[val], CEDAR, device="cpu", progress=False)
    captions = data.texts(np.arange(len(x)))
    vocabulary = [w for w, _ in vocabulary_from_texts(captions, min_count=3)]
    names = name_concepts(result.rotation, result.mean, vocabulary, encoder.encode_text(vocabulary))
    ids = data.metadata.column("id").to_pylist()
    catalog = build_catalog(
        names,
        result.rotation,
        result.mean,
        CEDAR_K,
        x[train],
        [ids[i] for i in train],
        [captions[i] for i in train],
    )
    catalog = write_test_concepts(catalog, vocabulary, described=floor is None)
    extra: dict = {"k": CEDAR_K, "catalog": catalog_json(catalog), "floor": {"value": floor}}
    tensors = {}
    if words:
        readout = beacon_readout(x, result.mean, extra_words, encoder if text else None)
        if zero_shot_words:
            directions = text_directions(encoder.encode_text(list(zero_shot_words)), result.mean)
            kinds = ["noun"] * len(zero_shot_words)
            readout = with_zero_shot(readout, zero_shot_words, kinds, directions, 0.0)
        extra["readout"], tensors = readout_record(readout), readout_tensors(readout)
        extra["readout"]["training"] = {"zero_shot_z": OPEN_Z}
    TransformArtifact(
        "cedar",
        result.rotation,
        result.mean,
        default_contract(dim),
        encoder=encoder.id,
        extra=extra,
        tensors=tensors,
    ).save(root / "cedar")
    out = root / "bundles"
    build_bundle(
        BuildConfig(
            cache=cache, grasp=root / "grasp", cedar=root / "cedar", out=out, progress=False
        )
    )
    return out


def write_test_concepts(
    catalog: Sequence[CatalogEntry], words: Sequence[str], described: bool = False
) -> list[CatalogEntry]:
    """The catalog with the busiest concept named LANTERN (its runner-ups LANTERN_RUNNER_UPS)
    and the next busiest left unnamed (its label as its name), as name_by_data leaves one:
    the premises of the concept tests, true for any trained rotation (with k of 2D concepts
    active in every row, the busiest is active in at least k/2D of the rows). With `described`,
    the busiest of the rest named by a caption word (`described_word`) is held to
    DESCRIBED_PRECISION."""
    written = {LANTERN, *(w for w, _ in LANTERN_RUNNER_UPS)}
    if written & set(words):
        raise AssertionError(f"the words written for the tests are in the captions: {written}")
    busiest = sorted(catalog, key=lambda e: (-e.frequency, e.concept))
    named, unnamed = busiest[0].concept, busiest[1].concept
    out = list(catalog)
    out[named] = dataclasses.replace(
        out[named],
        name=LANTERN,
        runner_ups=list(LANTERN_RUNNER_UPS),
        precision=LANTERN_PRECISION,
        named=True,
    )
    out[unnamed] = dataclasses.replace(
        out[unnamed],
        name=out[unnamed].label,
        score=0.0,
        precision=UNNAMED_PRECISION,
        named=False,
    )
    if described:
        word = next(e.name for e in busiest[2:] if e.named and e.name in set(words))
        out = [
            dataclasses.replace(e, precision=DESCRIBED_PRECISION) if e.name == word else e
            for e in out
        ]
    return out


def described_word(catalog: Sequence[CatalogEntry]) -> str:
    """The name the text bundle's catalog holds to DESCRIBED_PRECISION (write_test_concepts)."""
    names = {e.name for e in catalog if e.precision == DESCRIBED_PRECISION}
    assert len(names) == 1, "the text bundle's described word is missing"
    return names.pop()


def written_concepts(catalog: Sequence[CatalogEntry]) -> tuple[CatalogEntry, CatalogEntry]:
    """(the concept named LANTERN, the unnamed one) of the text bundle's catalog."""
    named = [e for e in catalog if e.name == LANTERN]
    unnamed = [e for e in catalog if not e.named]
    assert len(named) == len(unnamed) == 1, "the text bundle's written concepts are missing"
    return named[0], unnamed[0]


def build_image_bundle(
    root: Path, encoder: Encoder, write_png: Callable[..., Path], per_colour: int = 4
) -> Path:
    """BUNDLES folder of an open_clip bundle over solid-colour images (image gallery)."""
    records = []
    for colour, rgb in COLOURS.items():
        for i in range(per_colour):
            shade = tuple(max(0, c - 25 * i) for c in rgb)
            path = write_png(root / "images" / f"{colour}-{i}.png", shade, (32 + 8 * i, 32))
            records.append(
                {"id": f"{colour}-{i}", "text": f"a {colour} square", "image_path": str(path)}
            )
    listing = root / "images.jsonl"
    listing.write_text("".join(json.dumps(r) + "\n" for r in records))
    cache = root / "cache"
    embed_corpus(
        open_corpus("texts", listing),
        encoder,
        cache,
        EmbedConfig(dtype="float32", progress=False, modalities=("text", "image")),
    )
    x = EmbeddingCache.open(cache).embeddings("image")
    dim = x.shape[1]
    TransformArtifact.identity(dim, method="grasp-vl").save(root / "grasp")
    random_cedar_artifact(dim, 4, x, seed=1).save(root / "cedar")
    out = root / "bundles"
    build_bundle(
        BuildConfig(
            cache=cache, grasp=root / "grasp", cedar=root / "cedar", out=out, progress=False
        )
    )
    return out


def described_rows(engine: SearchEngine) -> list[int]:
    """The text bundle's rows whose code's phrase says its described word and not LANTERN
    (write_test_concepts: the premise of a phrase with near captions; no caption uses LANTERN,
    so a phrase saying it has none)."""
    word = described_word(engine.coder.catalog)
    ids, values = row_concepts(engine.bundle, range(engine.bundle.rows))
    names = [code_names(engine.coder, ids[r], values[r]) for r in range(engine.bundle.rows)]
    return [r for r, said in enumerate(names) if word in said and LANTERN not in said]


def captioned_row(engine: SearchEngine, count: int = 3) -> int:
    """The first of `described_rows` whose description has `count` near captions (the premise
    of the caption tests: among the rows nearest its code, that many captions say its phrase)."""
    query = SearchQuery.of("a red car")
    for row in described_rows(engine):
        explained = engine.explain(query, row=row, near_captions=count)
        if len(explained.item_description.captions) >= count:
            return row
    raise AssertionError("no described row of the text bundle has near captions")
