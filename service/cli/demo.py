"""The main job on the embedded default: the whole pipeline, on real captions, with MiniLM.

    strata demo

1. embed Flickr8k's 40,460 captions (or the compositional set when the shared data is absent)
   into an embedding cache;
2. train GraSP-VL (prefix length = granularity) and CEDAR (sparse named concepts) on it, with
   few epochs (the demo shows the pipeline; `strata train` runs them to convergence);
3. build, verify and publish an index bundle (a shared store serving every prefix, concept
   postings);
4. start the gRPC server on a free local port, and through the Python client search once at
   each granularity (and once AUTO, once with a concept filter), with explanations, and explain
   the best caption hit prefix by prefix;
5. stop the server.

Every stage leaves its output under `runs/demo/` and is skipped when that output is complete, so
a rerun (or a run after an interruption) only repeats what is missing: the embed job resumes,
training resumes from its checkpoint, a published bundle is reused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from indexer.format.bundle import Bundle
from indexer.format.manifest import BundleError
from service.api.background import BackgroundServer
from service.api.grpc.client import StrataClient, StrataClientError
from service.api.server import ServerConfig
from service.cli.demo_config import STAGE_SECONDS_PER_1K_ROWS, DemoConfig
from service.engine.search import SearchEngine
from service.results import Explanation, SearchResult
from training.cedar.fit import CedarFitConfig, fit_cedar
from training.cedar.readout.vocabulary import ReadoutConfig
from training.cedar.train import CedarConfig
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.encoders import shared_encoder
from training.core.errors import InputError
from training.core.settings import StrataSettings
from training.corpora import Corpus, open_corpus
from training.embedding.job import EmbedConfig, EmbedSummary, embed_corpus
from training.grasp.config import GALLERY_RECIPE, GraspConfig
from training.grasp.fit import fit_grasp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSearch:
    """One example search: its label, query, granularity and optional concept filter."""

    label: str
    text: str
    granularity: str
    exclude: tuple[str, ...] = ()


# One query per granularity, AUTO, and a concept filter, in the words of each corpus.
DEMO_SEARCHES: dict[str, tuple[DemoSearch, ...]] = {
    "flickr8k": (
        DemoSearch("object", "a dog", "object"),
        DemoSearch("attribute", "a black dog", "attribute"),
        DemoSearch("relation", "a dog jumping over a fence", "relation"),
        DemoSearch("caption", "a brown dog runs through the water at the beach", "caption"),
        DemoSearch("full", "two children playing soccer on a grassy field", "full"),
        DemoSearch("auto", "a man riding a bicycle", "auto"),
        DemoSearch("concept filter", "a dog running", "full", exclude=("beach",)),
    ),
    "compositional": (
        DemoSearch("object", "a dog", "object"),
        DemoSearch("attribute", "a brown dog", "attribute"),
        DemoSearch("relation", "a dog chasing a ball", "relation"),
        DemoSearch("caption", "a brown dog chasing a red ball on the beach", "caption"),
        DemoSearch("full", "a child holding a kite in the park", "full"),
        DemoSearch("auto", "a white horse", "auto"),
        DemoSearch("concept filter", "a dog chasing a ball", "full", exclude=("beach",)),
    ),
}


@dataclass
class DemoSearchResult:
    search: DemoSearch
    result: SearchResult
    skipped: str | None = None  # why a concept-filter example did not run


@dataclass
class DemoResult:
    corpus: str
    summary: EmbedSummary
    grasp: Path
    cedar: Path
    bundle: Path
    target: str
    searches: list[DemoSearchResult]
    explanation: Explanation | None
    explained_query: str
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "built in 12.3 s" | "reused"


def demo_corpus(settings: StrataSettings, scenes: int, seed: int = 0) -> tuple[str, Corpus]:
    flickr = settings.data_dir / "flickr8k"
    if (flickr / "Flickr8k.token.txt").is_file():
        return "flickr8k", open_corpus("flickr8k", flickr)
    log.warning("no Flickr8k at %s: using the compositional set instead", flickr)
    return "compositional", open_corpus("compositional", scenes=scenes, seed=seed)


def grasp_config(corpus: str, epochs: int, seed: int = 0, rows: int | None = None) -> GraspConfig:
    """The gallery recipe (fitted to the cache the demo indexes;
    docs/how-to/train-grasp.md#fit-the-gallery) on a sample of `rows`, validated on
    Flickr8k's dev images or the compositional val split."""
    validation = "dev" if corpus == "flickr8k" else "val"
    return GALLERY_RECIPE.model_copy(
        update={"epochs": epochs, "validation_split": validation, "seed": seed, "max_rows": rows}
    )


@dataclass(frozen=True)
class DemoPlan:
    """What the demo will do, known before any model loads: the corpus, where each stage's
    output goes, and for each stage "reused" or its estimated seconds."""

    corpus: str
    rows: int
    root: Path
    stages: dict[str, float | None]  # stage -> estimated seconds; None: reused

    @property
    def seconds(self) -> float:
        return sum(s for s in self.stages.values() if s is not None)


def plan_demo(settings: StrataSettings, config: DemoConfig, out: Path | None = None) -> DemoPlan:
    """The stages ahead (reused where their output is complete) and their estimated time,
    scaled by the corpus's rows from what the demo took on that corpus on two cores
    (STAGE_SECONDS_PER_1K_ROWS)."""
    name, corpus = demo_corpus(settings, config.scenes, config.seed)
    root = out or settings.runs_dir / "demo"
    rows = corpus.size_hint() or config.scenes
    done = {
        "embed": _opens(EmbeddingCache.open, root / f"cache-{name}-minilm"),
        "grasp-vl": _opens(TransformArtifact.load, root / f"grasp-{name}"),
        "cedar": _opens(TransformArtifact.load, root / f"cedar-{name}"),
        "index": _published(root / f"bundles-{name}") is not None,
        "search": False,
    }
    stages = {
        stage: None if done[stage] else rate * rows / 1000
        for stage, rate in STAGE_SECONDS_PER_1K_ROWS[name].items()
    }
    return DemoPlan(corpus=name, rows=rows, root=root, stages=stages)


def _opens(load: Callable[[Path], object], path: Path) -> bool:
    """Whether `load(path)` reads a whole earlier result (an InputError: none there yet)."""
    try:
        load(path)
    except InputError:
        return False
    return True


def _published(bundles: Path) -> Path | None:
    try:
        return Bundle.open(bundles).path
    except BundleError:
        return None


def run_demo(
    settings: StrataSettings, config: DemoConfig | None = None, out: Path | None = None
) -> DemoResult:
    """The whole pipeline (module docstring); outputs under `out` (default runs/demo)."""
    config = config or DemoConfig()
    name, corpus = demo_corpus(settings, config.scenes, config.seed)
    root = out or settings.runs_dir / "demo"
    encoder = shared_encoder("minilm", settings.device, settings.batch_size)
    stages: dict[str, str] = {}

    cache_dir = root / f"cache-{name}-minilm"
    started = time.perf_counter()
    embed = EmbedConfig(
        shard_rows=settings.shard_rows, dtype=settings.cache_dtype, progress=config.progress
    )
    summary = embed_corpus(corpus, encoder, cache_dir, embed)
    stages["embed"] = _took(started, summary.already_complete)

    grasp_dir = root / f"grasp-{name}"
    started = time.perf_counter()
    reuse = _opens(TransformArtifact.load, grasp_dir)
    if not reuse:
        log.info("training GraSP-VL (%d epochs)", config.grasp_epochs)
        fit_grasp(
            cache_dir,
            grasp_dir,
            grasp_config(name, config.grasp_epochs, config.seed, config.grasp_rows),
            views=root / f"views-{name}.npz",
            device=settings.device,
            overwrite=True,
            progress=config.progress,
            gallery=cache_dir,
        )
    stages["grasp-vl"] = _took(started, reuse)

    cedar_dir = root / f"cedar-{name}"
    started = time.perf_counter()
    reuse = _opens(TransformArtifact.load, cedar_dir)
    if not reuse:
        log.info("training CEDAR (%d epochs)", config.cedar_epochs)
        fit_cedar(
            CedarFitConfig(
                cache=cache_dir,
                out=cedar_dir,
                cedar=CedarConfig(epochs=config.cedar_epochs, seed=config.seed),
                readout=ReadoutConfig(seed=config.seed),
                device=settings.device,
                overwrite=True,
                progress=config.progress,
            )
        )
    stages["cedar"] = _took(started, reuse)

    bundles = root / f"bundles-{name}"
    started = time.perf_counter()
    published = _published(bundles)
    if published is None:
        build_bundle(
            BuildConfig(
                cache=cache_dir,
                grasp=grasp_dir,
                cedar=cedar_dir,
                out=bundles,
                seed=config.seed,
                progress=config.progress,
            )
        )
    stages["index"] = _took(started, published is not None)

    started = time.perf_counter()
    engine = SearchEngine(Bundle.open(bundles), encoder)
    with BackgroundServer(engine, ServerConfig(port=0)) as server:
        with StrataClient(server.target, timeout=120) as client:
            searches = [_example(client, search, config.k) for search in DEMO_SEARCHES[name]]
            caption = next(s for s in searches if s.search.label == "caption")
            explanation = None
            if caption.result.hits:
                explanation = client.explain(caption.search.text, row=caption.result.hits[0].row)
        target = server.target
    stages["search"] = _took(started, False, "served")
    return DemoResult(
        corpus=name,
        summary=summary,
        grasp=grasp_dir,
        cedar=cedar_dir,
        bundle=engine.bundle.path,
        target=target,
        searches=searches,
        explanation=explanation,
        explained_query=caption.search.text,
        stages=stages,
    )


def _example(client: StrataClient, search: DemoSearch, k: int) -> DemoSearchResult:
    """One example search; a concept-filter example whose concept the catalog lacks (names
    come from training) runs unfiltered and says so."""
    exclude = [c for c in search.exclude if _has_concept(client, c)]
    missing = sorted(set(search.exclude) - set(exclude))
    result = client.search(
        search.text,
        granularity=search.granularity,
        k=k,
        exclude=exclude,
        explain=True,
        metadata_fields=["caption"],
    )
    skipped = f"no concept named {', '.join(missing)} in this catalog" if missing else None
    return DemoSearchResult(search, result, skipped)


def _has_concept(client: StrataClient, name: str) -> bool:
    try:
        return bool(client.get_concept(name))
    except StrataClientError as exc:
        if exc.code == grpc.StatusCode.NOT_FOUND:
            return False
        raise


def _took(started: float, reused: bool, done: str = "built") -> str:
    return "reused" if reused else f"{done} in {time.perf_counter() - started:.1f} s"
