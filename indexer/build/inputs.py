"""The inputs of `strata index build`: its config, and the cache and artifacts it opens.

`open_inputs` opens the embedding cache and both artifacts and cross-checks them (a GraSP-VL
artifact as --grasp, a CEDAR one as --cedar, both of the cache's dimension and encoder), then
plans one index per prefix (indexer/format/index_plan.py). Every refusal names the input at fault.
`source_record` and `artifact_source` are what the manifest records of where a version's rows
and rotations came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from indexer.build.engines import ENGINES
from indexer.format.index_plan import RULES, IndexRule, PrefixPlan, parse_index_types, plan_indexes
from indexer.format.manifest import ARTIFACT_COPIES, ArtifactSource
from indexer.format.tuning import RECALL_TARGET, TUNING_QUERIES
from training.cedar.concepts import ConceptCoder
from training.core.artifacts import MANIFEST as ARTIFACT_MANIFEST
from training.core.artifacts import WEIGHTS as ARTIFACT_WEIGHTS
from training.core.artifacts import TransformArtifact
from training.core.cache import MANIFEST as CACHE_MANIFEST
from training.core.cache import EmbeddingCache
from training.core.config import ConfigModel
from training.core.errors import InputError
from training.core.files import sha256_file


class BuildError(InputError):
    """Inputs the build cannot use (named), or a written version that failed verification."""


class BuildConfig(ConfigModel):
    """What `strata index build` is asked to do (its flags); immutable once made."""

    model_config = ConfigDict(frozen=True)

    cache: Path
    grasp: Path
    cedar: Path
    out: Path
    modality: str | None = None  # default: image when the cache has it, else its modality
    memory_budget: int = 4 * 2**30  # per prefix index, see index_plan.RULES
    index_types: tuple[str, ...] = ()  # "PREFIX=FACTORY" overrides
    keep: int = 3
    progress: bool = True
    seed: int = 0
    verify_sample: int = 64
    rules: tuple[IndexRule, ...] = RULES
    engine: str = "local"  # where the per-shard work runs: local | ray
    ray_address: str | None = None  # --engine ray: a cluster to join (default: RAY_ADDRESS/local)
    recall_target: float = Field(RECALL_TARGET, gt=0, le=1)  # recall@10 the tuning aims at
    tuning_queries: int = Field(TUNING_QUERIES, ge=1)  # held-out gallery rows it measures on
    # the shared vector store's codes (indexer/format/store/); "none": a file per prefix
    store: Literal["none", "float16", "int8"] = "int8"
    # the store is read through mmap for reranks only, not counted as resident (footprint.py)
    store_on_disk: bool = False
    # an int8 store's codes one file a block or of whole rows (format/store/block_layout.py);
    # a float16 store keeps whole rows
    store_layout: Literal["blocks", "rows"] = "blocks"


@dataclass
class BuildInputs:
    """The validated inputs of a build."""

    cache: EmbeddingCache
    modality: str
    grasp: TransformArtifact
    cedar: TransformArtifact
    coder: ConceptCoder
    plans: list[PrefixPlan]


def load_artifact(path: Path, role: str) -> TransformArtifact:
    try:
        return TransformArtifact.load(path)
    except InputError as exc:
        raise BuildError(f"--{role} {path}: {exc}") from None


def open_inputs(config: BuildConfig) -> BuildInputs:
    """Open and cross-check the cache and both artifacts; plan the indexes. Every refusal is a
    BuildError (or another InputError) that names the input at fault."""
    cache = EmbeddingCache.open(config.cache)
    if cache.rows == 0:
        raise BuildError(f"the embedding cache {config.cache} holds no rows")
    modality = config.modality or ("image" if "image" in cache.modalities else cache.modalities[0])
    if modality not in cache.modalities:
        raise BuildError(
            f"the cache {config.cache} has no {modality} embeddings ({', '.join(cache.modalities)})"
        )
    grasp = load_artifact(config.grasp, "grasp")
    cedar = load_artifact(config.cedar, "cedar")
    if grasp.method == "cedar":
        raise BuildError(
            f"--grasp {config.grasp} is a CEDAR artifact; pass it as --cedar, and a GraSP-VL "
            "artifact as --grasp"
        )
    if cedar.method != "cedar":
        raise BuildError(
            f"--cedar {config.cedar} is a {cedar.method!r} artifact, not a CEDAR one "
            "(method 'cedar'); a GraSP-VL artifact goes to --grasp"
        )
    for role, artifact, path in (("grasp", grasp, config.grasp), ("cedar", cedar, config.cedar)):
        if artifact.dim != cache.dim:
            raise BuildError(
                f"dimension mismatch: the cache {config.cache} holds {cache.dim}-d embeddings, "
                f"the --{role} artifact {path} is {artifact.dim}-d"
            )
        encoder = cache.manifest.encoder
        if artifact.encoder and encoder and artifact.encoder != encoder:
            raise BuildError(
                f"encoder mismatch: the cache {config.cache} was embedded with {encoder!r}, "
                f"the --{role} artifact {path} was trained on {artifact.encoder!r}"
            )
    try:
        coder = ConceptCoder(cedar)
    except InputError as exc:
        raise BuildError(f"--cedar {config.cedar}: {exc}") from None
    if config.keep < 1:
        raise BuildError(f"--keep must be at least 1, got {config.keep}")
    if config.engine not in ENGINES:
        raise BuildError(f"unknown --engine {config.engine!r} ({' | '.join(ENGINES)})")
    overrides = parse_index_types(config.index_types, grasp.contract)
    plans = plan_indexes(
        cache.rows,
        grasp.contract,
        config.memory_budget,
        overrides,
        config.rules,
        store=config.store != "none",
    )
    return BuildInputs(cache, modality, grasp, cedar, coder, plans)


def source_record(cache: EmbeddingCache) -> dict:
    manifest = cache.root / CACHE_MANIFEST
    return {
        "cache": str(cache.root.resolve()),
        "cache_manifest_sha256": sha256_file(manifest) if manifest.is_file() else None,
        "cache_format": cache.manifest.source,
        "rows": cache.rows,
        "shards": len(cache.manifest.shards),
        "image_root": cache.manifest.image_root,  # relative image paths' root (None: absolute)
    }


def artifact_source(path: Path, artifact: TransformArtifact, role: str) -> ArtifactSource:
    return ArtifactSource(
        path=str(path.resolve()),
        method=artifact.method,
        manifest_sha256=sha256_file(path / ARTIFACT_MANIFEST),
        weights_sha256=sha256_file(path / ARTIFACT_WEIGHTS),
        copy=ARTIFACT_COPIES[role],
    )
