"""CEDAR: the rotation, its sparse codes, naming, the catalog, the coder, the eval and the CLI."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from training.cedar.catalog import build_catalog, catalog_json, name_concepts, vocabulary_from_texts
from training.cedar.concepts import REFERENCE, ConceptCoder
from training.cedar.evaluate import concept_purity, factor_rows, rotation_method
from training.cedar.fit import CedarFitConfig, fit_cedar
from training.cedar.readout.vocabulary import ReadoutConfig
from training.cedar.sparse_codes import (
    concept_ids,
    concept_label,
    parse_concept_label,
    reconstruct,
    sparse_codes,
)
from training.cedar.train import CedarConfig, k_bounds, train_cedar
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.errors import InputError
from training.core.granularity import default_contract
from training.core.metrics import cknna, fraction_of_variance_unexplained
from training.core.rotations import (
    ica_rotation,
    orthogonality_error,
    pca_rotation,
    random_rotation,
)
from training.corpora.compositional import CompositionalCorpus
from training.embedding.job import EmbedConfig, embed_corpus
from training.probes import encode_labels, fit_linear_probe

DIM = 16
FAST = {"epochs": 6, "batch_size": 128, "k": 4, "k_min": 2, "k_max": 8, "patience": 6}


def sparse_data(n: int = 1200, active: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows that are sparse in a random rotated basis (not the PCA one): b + codes @ Q."""
    rng = np.random.default_rng(seed)
    basis = random_rotation(DIM, seed + 1)
    codes = np.zeros((n, DIM))
    for row in codes:
        chosen = rng.choice(DIM, active, replace=False)
        row[chosen] = rng.laplace(scale=1.0, size=active) + np.sign(rng.normal(size=active))
    mean = rng.normal(scale=0.3, size=DIM)
    return (codes @ basis + mean).astype(np.float32), basis


@pytest.fixture(scope="module")
def trained():
    x, basis = sparse_data()
    result = train_cedar(x[:1000], x[1000:], CedarConfig(**FAST), progress=False)
    return x, basis, result


def test_rotation_is_orthogonal_and_reconstruction_exact_at_k_equal_d(trained):
    x, _, result = trained
    assert orthogonality_error(result.rotation) < 1e-6
    assert np.abs(reconstruct(x, result.rotation, result.mean, DIM) - x).max() < 1e-5


def test_fvu_is_non_increasing_in_k_and_training_beats_pca(trained):
    x, _, result = trained
    test = x[1000:]
    fvus = [
        fraction_of_variance_unexplained(test, reconstruct(test, result.rotation, result.mean, k))
        for k in range(1, DIM + 1)
    ]
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(fvus))
    mean = x[:1000].mean(axis=0)
    pca = pca_rotation(x[:1000] - mean)
    for k in (3, 4):
        pca_fvu = fraction_of_variance_unexplained(test, reconstruct(test, pca, mean, k))
        assert fvus[k - 1] < 0.8 * pca_fvu, (k, fvus[k - 1], pca_fvu)


def test_training_is_deterministic_and_resumes(tmp_path: Path):
    x, _ = sparse_data(600)
    config = CedarConfig(**{**FAST, "epochs": 3})
    a = train_cedar(x[:500], x[500:], config, progress=False)
    b = train_cedar(x[:500], x[500:], config, progress=False)
    np.testing.assert_array_equal(a.rotation, b.rotation)
    # two epochs, then a rerun asked for three continues from the second epoch's checkpoint
    first = train_cedar(
        x[:500], x[500:], config.model_copy(update={"epochs": 2}), tmp_path, progress=False
    )
    assert first.epochs_run == 2
    resumed = train_cedar(x[:500], x[500:], config, tmp_path, progress=False)
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3]
    assert resumed.seconds > first.seconds  # training time adds up over resumes
    np.testing.assert_allclose(resumed.rotation, a.rotation, atol=1e-6)
    # a checkpoint made with another config is ignored, not continued
    other = train_cedar(
        x[:500], x[500:], config.model_copy(update={"seed": 1}), tmp_path, progress=False
    )
    assert other.history[0]["l1"] != resumed.history[0]["l1"]


def test_the_seed_decides_the_weights_file(tmp_path: Path):
    """The ICA start and the data order and k draws all follow the seed."""
    x, _ = sparse_data(600)

    def digest(seed: int, run: str) -> str:
        config = CedarConfig(**{**FAST, "epochs": 2, "init": "ica", "seed": seed})
        result = train_cedar(x[:500], x[500:], config, progress=False)
        cedar_artifact(x[:500], result.rotation, result.mean)[0].save(tmp_path / run)
        return hashlib.sha256((tmp_path / run / "weights.safetensors").read_bytes()).hexdigest()

    first = digest(3, "a")
    assert digest(3, "b") == first
    assert digest(4, "c") != first


def test_ica_finds_the_planted_sparse_basis():
    x, basis = sparse_data(2000)
    rotation = ica_rotation(x - x.mean(axis=0))
    assert orthogonality_error(rotation) < 1e-8
    match = np.abs(rotation @ basis.T).max(axis=1)  # each axis against its nearest true axis
    assert np.median(match) > 0.95, match
    assert np.median(np.abs(pca_rotation(x - x.mean(axis=0)) @ basis.T).max(axis=1)) < 0.9


def test_fixed_rows_stay_and_the_rest_is_learnt():
    x, _ = sparse_data(600)
    start = random_rotation(DIM, seed=7)
    config = CedarConfig(**{**FAST, "epochs": 2, "code_l1": 0.5})
    result = train_cedar(x[:500], x[500:], config, progress=False, initial=start, fixed_rows=5)
    np.testing.assert_allclose(result.rotation[:5], start[:5], atol=1e-6)
    assert np.abs(result.rotation[5:] - start[5:]).max() > 1e-2
    assert orthogonality_error(result.rotation) < 1e-6
    assert "code_l1" in result.history[0]
    with pytest.raises(ValueError, match="orthogonal"):
        train_cedar(x[:500], x[500:], config, progress=False, initial=2 * start)
    with pytest.raises(ValueError, match="fixed_rows"):
        train_cedar(x[:500], x[500:], config, progress=False, initial=start, fixed_rows=DIM)
    with pytest.raises(ValidationError, match="init"):
        CedarConfig(init="kmeans")


def test_curriculum_goes_from_dense_to_the_range():
    assert k_bounds(0.0, 384, 4, 128) == (384, 384)
    assert k_bounds(1.0, 384, 4, 128) == (4, 128)
    low, high = k_bounds(0.5, 384, 4, 128)
    assert 4 < low < high < 384


def test_bad_input_is_refused():
    with pytest.raises(ValidationError, match="k_min <= k <= k_max"):
        CedarConfig(k=256, k_max=128)
    x, _ = sparse_data(100)
    with pytest.raises(ValueError, match="k_max 128 exceeds the embeddings' dimension 16"):
        train_cedar(x, x, CedarConfig(), progress=False)
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        train_cedar(bad, x, CedarConfig(**FAST), progress=False)
    with pytest.raises(ValueError, match="k must be between 1 and the dimension 16"):
        reconstruct(x, np.eye(DIM), np.zeros(DIM), 17)
    with pytest.raises(ValueError, match="not a concept label"):
        parse_concept_label("+99", DIM)


def test_concept_ids_and_labels_round_trip():
    axes = np.array([[3, 0]])
    values = np.array([[0.5, -0.2]])
    ids = concept_ids(axes, values)
    assert ids.tolist() == [[6, 1]]
    assert [concept_label(int(c)) for c in ids[0]] == ["+3", "-0"]
    assert [parse_concept_label(concept_label(c), DIM) for c in range(2 * DIM)] == list(
        range(2 * DIM)
    )


def planted_vocabulary(seed: int = 3) -> tuple[list[str], np.ndarray]:
    words = ["dog", "cat", "grass", "red", "running", "water", "ball", "snow"]
    rng = np.random.default_rng(seed)
    embeddings = rng.normal(size=(len(words), DIM))
    return words, embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)


def test_training_then_naming_recovers_a_planted_concept():
    """Rows whose sparse axes include the (centred) text embedding of "dog": after training,
    some concept is named "dog" with a cosine above 0.9, and it fires on the dog rows."""
    words, embeddings = planted_vocabulary()
    rng = np.random.default_rng(5)
    mean = rng.normal(scale=0.1, size=DIM)
    dog = embeddings[0] - mean
    dog /= np.linalg.norm(dog)
    # an orthonormal basis whose first vector is the dog direction
    q, _ = np.linalg.qr(np.column_stack([dog, rng.normal(size=(DIM, DIM - 1))]))
    basis = (q * np.sign(q[:, 0] @ dog)).T
    n = 1500
    codes = np.zeros((n, DIM))
    has_dog = rng.random(n) < 0.3
    codes[has_dog, 0] = rng.uniform(2.0, 3.0, has_dog.sum())
    for row in codes:
        others = rng.choice(np.arange(1, DIM), 2, replace=False)
        row[others] = rng.laplace(scale=1.0, size=2)
    x = (codes @ basis + mean).astype(np.float32)
    result = train_cedar(x[:1200], x[1200:], CedarConfig(**FAST), progress=False)
    names = name_concepts(result.rotation, result.mean, words, embeddings)
    dogs = [c for c in names if c.name == "dog"]
    best = max(dogs, key=lambda c: c.score)
    assert best.score > 0.9 and best.runner_ups[0][1] < 0.5
    active = concept_ids(*sparse_codes(x, result.rotation, result.mean, 3))
    fires = (active == best.concept).any(axis=1)
    assert (fires & has_dog).sum() / fires.sum() > 0.9
    assert (fires & has_dog).sum() / has_dog.sum() > 0.9


def cedar_artifact(x: np.ndarray, rotation: np.ndarray, mean: np.ndarray, k: int = 3):
    words, embeddings = planted_vocabulary()
    names = name_concepts(rotation, mean, words, embeddings)
    catalog = build_catalog(
        names,
        rotation,
        mean,
        k,
        x,
        [f"row-{i}" for i in range(len(x))],
        [f"t{i}" for i in range(len(x))],
    )
    return TransformArtifact(
        method="cedar",
        rotation=rotation,
        mean=mean,
        contract=default_contract(DIM),
        extra={"k": k, "catalog": catalog_json(catalog)},
    ), catalog


def test_catalog_coder_and_artifact_round_trip(trained, tmp_path: Path):
    x, _, result = trained
    artifact, catalog = cedar_artifact(x, result.rotation, result.mean)
    assert len(catalog) == 2 * DIM
    # each row has exactly k active concepts, so the frequencies sum to k
    assert sum(e.frequency for e in catalog) == pytest.approx(3)
    top = catalog[0].examples[0]
    assert top["activation"] >= catalog[0].examples[-1]["activation"]
    artifact.save(tmp_path / "cedar")
    coder = ConceptCoder(TransformArtifact.load(tmp_path / "cedar"))
    concepts, activations = coder.encode(x[:5])
    assert concepts.shape == (5, 3) and (np.diff(activations, axis=1) <= 0).all()
    described = coder.describe(x[:1])[0]
    assert [a.name for a in described] == [catalog[c].name for c in concepts[0]]
    assert coder.resolve(described[0].label) == [described[0].concept]
    assert described[0].concept in coder.resolve(described[0].name)
    with pytest.raises(InputError, match="no concept is named"):
        coder.resolve("unicorn")
    with pytest.raises(InputError, match="expected embeddings"):
        coder.encode(np.zeros((2, DIM + 1)))
    grasp_like = TransformArtifact.identity(DIM, method="grasp-vl")
    with pytest.raises(InputError, match="needs a CEDAR artifact"):
        ConceptCoder(grasp_like)


def test_vocabulary_from_captions_keeps_content_words():
    texts = ["Two dogs are running on the grass", "A dog runs on grass", "a red ball"] * 3
    vocabulary = dict(vocabulary_from_texts(texts, min_count=3))
    assert vocabulary["dog"] == "noun" and vocabulary["grass"] == "noun"
    assert vocabulary["running"] == "verb" and vocabulary["red"] == "adjective"
    assert "the" not in vocabulary and "on" not in vocabulary and "two" not in vocabulary


def test_cknna_and_probe_react_to_what_they_should():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(300, 8))
    assert cknna(a, a) == pytest.approx(1.0, abs=1e-6)
    assert cknna(a, a @ random_rotation(8, 2)) == pytest.approx(1.0, abs=1e-6)
    assert cknna(a, rng.normal(size=(300, 8))) < 0.2
    labels = (a[:, 0] > 0).astype(int).astype(str)
    y, classes = encode_labels(labels)
    probe = fit_linear_probe(a[:200], y[:200], classes)
    clean = probe.cross_entropy(a[200:], y[200:])
    noisy = probe.cross_entropy(a[200:] + rng.normal(scale=3.0, size=(100, 8)), y[200:])
    assert clean < 0.3 < noisy


def test_purity_picks_the_best_matching_named_concept_and_needs_support():
    has_dog = np.zeros(40, dtype=bool)
    has_dog[:20] = True
    active = np.full((40, 1), 1)  # concept 1 ("x") everywhere by default
    active[:18, 0] = 0  # concept 0 ("dog") fires on 18 dog rows ...
    active[20:24, 0] = 0  # ... and on 4 other rows: precision 18/22, recall 0.9
    active[18, 0] = 2  # concept 2 ("dog") fires on one dog row only: precision 1, recall 0.05
    result = concept_purity(active, ["dog", "x", "dog"], {"dog": has_dog, "cat": ~has_dog})
    dog = result["factors"]["dog"]
    assert dog["concept"] == 0 and dog["precision"] == pytest.approx(18 / 22)
    assert dog["recall"] == pytest.approx(0.9) and result["found"] == ["dog"]
    assert result["factors"]["cat"] is None and result["share"] == 0.5
    # the lone precise concept alone does not count: too little support
    alone = concept_purity(active, ["x", "x", "dog"], {"dog": has_dog})
    assert alone["factors"]["dog"]["precision"] == 1.0 and alone["share"] == 0.0


def test_rotation_methods_share_one_metric_code(trained):
    x, _, result = trained
    method = rotation_method("cedar", result.rotation, result.mean)
    assert method.directions.shape == (2 * DIM, DIM)
    assert method.concepts(x[:4], 3).shape == (4, 3)
    assert np.allclose(method.reconstruct(x[:4], DIM), x[:4], atol=1e-5)


@pytest.fixture(scope="module")
def compositional_cache(tiny_clip, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cedar") / "comp"
    config = EmbedConfig(dtype="float32", progress=False)
    embed_corpus(CompositionalCorpus(scenes=600, seed=1), tiny_clip, out, config)
    return out


def test_factor_rows_from_compositional_metadata(compositional_cache: Path):
    factors = factor_rows(EmbeddingCache.open(compositional_cache).metadata())
    assert {"dog", "red", "sitting", "beach", "ball"} <= set(factors)
    assert all(mask.any() for mask in factors.values())


@pytest.mark.slow
def test_fit_cedar_takes_one_config_and_returns_one_result(
    compositional_cache: Path, tmp_path: Path
):
    fit = CedarFitConfig(
        cache=compositional_cache,
        out=tmp_path / "cedar",
        cedar=CedarConfig(epochs=1, k=8, k_min=4, k_max=16, batch_size=64, seed=3),
        readout=ReadoutConfig(epochs=1),
        device="cpu",
        progress=False,
    )
    fitted = fit_cedar(fit)
    saved = TransformArtifact.load(fit.out)
    assert saved.config["seed"] == 3 and fitted.result.epochs_run == 1
    assert len(fitted.catalog) == len(saved.extra["catalog"]) == 2 * saved.dim
    assert saved.extra["vocabulary"]["size"] == fitted.vocabulary["size"] > 0
    assert saved.extra["naming"]["by"] == fitted.naming["by"] == "data"
    readout = fitted.readout  # the readout's record, tensors and training, as the file holds them
    assert readout is not None and readout.info["words"] > 0 and "history" in readout.info
    assert readout.record["config"] == fit.readout.model_dump()
    assert set(saved.extra["readout"]) == set(readout.record)
    assert set(saved.extra["readout"]["training"]) == set(readout.info) - {"history"}
    assert readout.tensors and set(readout.tensors) <= set(saved.tensors)
    # each concept's reference agreement on the cache's val rows: won of active, counted on
    # learnt words and named axes, never on a zero-shot word (no training rows to shift from)
    coder = ConceptCoder(saved)
    reference = saved.tensors[REFERENCE]
    assert reference.shape == (coder.concepts, 2) and reference[:, 1].sum() > 0
    assert ((reference[:, 0] >= 0) & (reference[:, 0] <= reference[:, 1])).all()
    zero_shot = [c for c, e in enumerate(coder.catalog) if e.zero_shot]
    assert (reference[zero_shot] == 0).all()
    unnamed = [c for c, e in enumerate(coder.catalog[: coder.axis_concepts]) if not e.named]
    assert (reference[unnamed] == 0).all()
    bare = fit_cedar(fit.model_copy(update={"out": tmp_path / "bare", "readout": None}))
    assert bare.readout is None and "readout" not in TransformArtifact.load(tmp_path / "bare").extra
    with pytest.raises(ValidationError, match="extra"):  # a misspelt option is an error
        CedarFitConfig(cache=compositional_cache, out=tmp_path / "x", epochs=2)


@pytest.mark.slow
def test_train_and_eval_commands(strata, compositional_cache: Path, tmp_path: Path):
    artifact = tmp_path / "cedar"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"epochs": 2, "k": 8, "k_min": 4, "k_max": 16, "batch_size": 64}))
    done = strata(
        "train",
        "cedar",
        "--cache",
        str(compositional_cache),
        "--out",
        str(artifact),
        "--config",
        str(config),
        "--seed",
        "5",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    loaded = TransformArtifact.load(artifact)
    assert loaded.method == "cedar" and len(loaded.extra["catalog"]) == 2 * loaded.dim
    assert loaded.config["seed"] == 5  # --seed overrides the config file's (default) seed
    floor = loaded.extra["floor"]  # picked on the val rows, where the engine reads it
    assert 0.0 <= floor["value"] <= 0.95 and floor["curve"][str(floor["value"])] == max(
        floor["curve"].values()
    )
    assert "zero_shot_z" in loaded.extra["readout"]["training"]  # the open vocabulary's z
    again = strata(
        "train",
        "floor",
        "--artifact",
        str(artifact),
        "--cache",
        str(compositional_cache),
        "--zero-shot-z",
        "--dry-run",
    )
    assert again.returncode == 0, again.stderr
    assert f"floor {floor['value']:.2f}" in again.stdout and "zero_shot_z " in again.stdout
    # an artifact made before the reference agreement was kept gets the same one from the floor
    older = TransformArtifact.load(artifact)
    reference = older.tensors.pop(REFERENCE)
    older.save(tmp_path / "older")
    given = strata(
        "train", "floor", "--artifact", str(tmp_path / "older"), "--cache", str(compositional_cache)
    )
    assert given.returncode == 0, given.stderr
    assert np.array_equal(TransformArtifact.load(tmp_path / "older").tensors[REFERENCE], reference)
    missing = strata(
        "train", "floor", "--artifact", str(tmp_path / "none"), "--cache", str(artifact)
    )
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    metadata = EmbeddingCache.open(compositional_cache).metadata().to_pydict()
    caption = dict(zip(metadata["id"], metadata["caption"], strict=True))
    split = dict(zip(metadata["id"], metadata["split"], strict=True))
    for entry in loaded.extra["catalog"][:8]:  # examples are training rows, with their own text
        for example in entry["examples"]:
            assert example["text"] == caption[example["id"]] and split[example["id"]] == "train"
    report = tmp_path / "report"
    done = strata(
        "eval",
        "cedar",
        "--cache",
        str(compositional_cache),
        "--artifact",
        str(artifact),
        "--out",
        str(report),
        "--baselines",
        "identity,pca,topk",
        "--sae-epochs",
        "2",
        "--ks",
        "4,8",
        "--gallery",
        str(compositional_cache),
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((report / "report.json").read_text())
    quality = data["filter_quality"]  # judged by each scene's own caption (one per scene)
    assert {"cedar", "cedar (cosine names)", "topk-sae", "keyword (own caption)"} <= set(
        quality["methods"]
    )
    assert any(m.startswith("as served: readout row") for m in quality["methods"])
    keyword = quality["methods"]["keyword (own caption)"]["all"]
    assert keyword["precision"] == 1.0 and keyword["recall"] == 1.0
    assert quality["naming"]["cedar (cosine names)"]["named"] == 2 * loaded.dim
    assert "## Concept-filter quality" in (report / "report.md").read_text()
    assert set(data["methods"]) == {"cedar", "identity", "pca", "topk-sae"}
    for name, result in data["methods"].items():
        assert set(result["fvu"]) == {"4", "8"}
        if not name.endswith("-sae"):  # a rotation's FVU cannot rise with K; an SAE's can
            assert result["fvu"]["8"] <= result["fvu"]["4"]
        assert "purity" in result and set(result["lp"]) == {"subject", "subject_attribute"}
    assert (report / "fvu_k.png").stat().st_size > 0
    assert (report / "concepts.md").read_text().startswith("# The 20 most frequent")
    (saved,) = (report / "saes").glob("topk-*.pt")
    written = saved.stat().st_mtime_ns
    again = strata(
        "eval",
        "cedar",
        "--cache",
        str(compositional_cache),
        "--artifact",
        str(artifact),
        "--out",
        str(report),
        "--baselines",
        "topk",
        "--sae-epochs",
        "2",
        "--ks",
        "4,8",
        "--no-progress",
    )
    assert again.returncode == 0, again.stderr
    reused = json.loads((report / "report.json").read_text())["methods"]["topk-sae"]
    assert reused["fvu"] == data["methods"]["topk-sae"]["fvu"]
    assert saved.stat().st_mtime_ns == written  # reused, not trained again
    bad = strata(
        "eval",
        "cedar",
        "--cache",
        str(compositional_cache),
        "--out",
        str(report),
        "--baselines",
        "pca,svd",
    )
    assert bad.returncode != 0 and "unknown baseline(s) svd" in bad.stderr
    assert "Traceback" not in bad.stderr
