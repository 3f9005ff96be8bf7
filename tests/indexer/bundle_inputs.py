"""What the indexer's tests share: a small gallery cache and artifacts made on the spot, and
ways to run `strata` command lines (in this process, or in child processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.build.full import BuildSummary, build_bundle
from indexer.build.inputs import BuildConfig
from training.core.cache import CacheManifest, EmbeddingCache, write_manifest, write_shard
from training.synthetic import (
    cluster_centres,
    clustered_rows,
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)

DIM = 64  # default contract 4 / 8 / 16 / 32 / 64
K = 4
REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("cli_runner.py")


@dataclass(frozen=True)
class Inputs:
    """A cache and the two artifacts a build takes."""

    cache: Path
    grasp: Path
    cedar: Path

    def config(self, out: Path, **overrides) -> BuildConfig:
        return BuildConfig(
            cache=self.cache,
            grasp=self.grasp,
            cedar=self.cedar,
            out=out,
            progress=False,
            **overrides,
        )

    def build(self, out: Path, **overrides) -> BuildSummary:
        return build_bundle(self.config(out, **overrides))

    def args(self, out: Path, *extra: str) -> list[str]:
        """`strata index build` arguments for this input set."""
        return [
            "index",
            "build",
            "--cache",
            str(self.cache),
            "--grasp",
            str(self.grasp),
            "--cedar",
            str(self.cedar),
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]

    def embeddings(self) -> np.ndarray:
        return EmbeddingCache.open(self.cache).embeddings("image")


def make_inputs(root: Path, rows: int, shard_rows: int, clusters: int, seed: int) -> Inputs:
    cache = write_synthetic_cache(
        root / "cache", rows, DIM, shard_rows=shard_rows, clusters=clusters, seed=seed
    )
    random_grasp_artifact(DIM, seed).save(root / "grasp")
    sample = EmbeddingCache.open(cache).embeddings("image")[:300]
    random_cedar_artifact(DIM, K, sample, seed=seed + 1).save(root / "cedar")
    return Inputs(cache, root / "grasp", root / "cedar")


@dataclass
class Run:
    """What one command line did: exit code (−9 when SIGKILLed), stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_strata_batch(jobs: list[tuple[list[str], dict[str, str]]], folder: Path) -> list[Run]:
    """Run each (args, extra environment) as `strata ARGS` in its own child process, in order.

    One runner process imports the CLI once and forks a child per command line (cli_runner.py),
    so a batch costs one interpreter start-up rather than one per command."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = [
        {
            "args": args,
            "env": env,
            "stdout": str(folder / f"{i}.out"),
            "stderr": str(folder / f"{i}.err"),
        }
        for i, (args, env) in enumerate(jobs)
    ]
    (folder / "jobs.json").write_text(json.dumps(spec))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "STRATA_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(folder / "jobs.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    return [
        Run(code, Path(job["stdout"]).read_text(), Path(job["stderr"]).read_text())
        for code, job in zip(codes, spec, strict=True)
    ]


def assert_one_line_error(run: Run, *fragments: str) -> str:
    """Exit 2, no traceback, and a last stderr line `strata: error: ...` with the fragments."""
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("strata: error: "), last
    for fragment in fragments:
        assert fragment in last, last
    return last


def write_cache(
    root: Path, shards: list[tuple[np.ndarray, list[str]]], encoder: str = "synthetic"
) -> Path:
    """A complete cache whose shards hold exactly these (image rows, ids), in this order."""
    manifest = CacheManifest(encoder=encoder, dim=DIM, dtype="float16", modalities=["image"])
    for index, (rows, ids) in enumerate(shards):
        metadata = pa.table({"id": ids, "caption": [f"caption of {i}" for i in ids]})
        manifest.shards.append(write_shard(root, index, {"image": rows}, metadata, "float16"))
    manifest.complete = True
    write_manifest(root, manifest)
    return root


@dataclass(frozen=True)
class Parts:
    """Caches cut from the same rows, for incremental updates against full builds: A (two
    shards), B (two shards, other ids), AB = A's shards then B's, and A_KEPT = A's shards
    without the rows of `dropped` (every 7th row of A)."""

    root: Path
    grasp: Path
    cedar: Path
    caches: dict[str, Path]
    a_ids: list[str]
    b_ids: list[str]
    dropped: list[str]

    def inputs(self, cache: str) -> Inputs:
        return Inputs(self.caches[cache], self.grasp, self.cedar)

    def build(self, cache: str, out: Path, **overrides) -> BuildSummary:
        return self.inputs(cache).build(out, **overrides)


def make_parts(root: Path, seed: int = 3) -> Parts:
    centres = cluster_centres(8, DIM, seed)
    a_sizes, b_sizes = (150, 150), (80, 40)
    a = [clustered_rows(centres, n, seed=seed * 10 + i)[0] for i, n in enumerate(a_sizes)]
    b = [clustered_rows(centres, n, seed=seed * 10 + 5 + i)[0] for i, n in enumerate(b_sizes)]
    a_ids = [[f"a-{i}-{j}" for j in range(n)] for i, n in enumerate(a_sizes)]
    b_ids = [[f"b-{i}-{j}" for j in range(n)] for i, n in enumerate(b_sizes)]
    a_shards, b_shards = list(zip(a, a_ids, strict=True)), list(zip(b, b_ids, strict=True))
    kept = [
        (x[np.arange(len(x)) % 7 != 3], [i for j, i in enumerate(ids) if j % 7 != 3])
        for x, ids in a_shards
    ]
    caches = {
        "A": write_cache(root / "A", a_shards),
        "B": write_cache(root / "B", b_shards),
        "AB": write_cache(root / "AB", a_shards + b_shards),
        "A_KEPT": write_cache(root / "A_KEPT", kept),
    }
    random_grasp_artifact(DIM, seed).save(root / "grasp")
    random_cedar_artifact(DIM, K, np.concatenate(a), seed=seed + 1).save(root / "cedar")
    flat_a = [i for ids in a_ids for i in ids]
    return Parts(
        root,
        root / "grasp",
        root / "cedar",
        caches,
        flat_a,
        [i for ids in b_ids for i in ids],
        [i for ids in a_ids for j, i in enumerate(ids) if j % 7 == 3],
    )


def gaussian_unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """n Gaussian rows of `dim`, each scaled to unit length, float32 (seeded)."""
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)
