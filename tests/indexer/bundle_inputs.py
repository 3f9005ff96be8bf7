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

from indexer.benchmarks.synthetic import (
    random_cedar_artifact,
    random_grasp_artifact,
    write_synthetic_cache,
)
from indexer.build import BuildConfig, BuildSummary, build_bundle
from training.embedding.cache import EmbeddingCache

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
        return BuildConfig(self.cache, self.grasp, self.cedar, out, progress=False, **overrides)

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
