"""The bad-input table of the `strata` command: every input a user can get wrong, its message
and its exit code, each run as a real `strata` subprocess.

tests/service/cli/test_cli_errors.py builds a small bundle (and copies of it missing or truncating
its first vector file: `damaged_copies`), holds a busy port (`listening_socket`), runs every case
of `error_cases` and asserts its outcome.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    what: str
    args: tuple[str, ...]
    expect: str  # a fragment of the error line
    code: int = 2


@dataclass(frozen=True)
class Outcome:
    case: Case
    code: int
    stderr: str
    seconds: float

    @property
    def line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""

    @property
    def ok(self) -> bool:
        """One line `strata: error: …` holding the expected fragment, the expected exit code."""
        return (
            self.code == self.case.code
            and len(self.stderr.strip().splitlines()) == 1
            and self.line.startswith("strata: error: ")
            and self.case.expect in self.line
            and "Traceback" not in self.stderr
        )


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def damaged_copies(bundles: Path, work: Path) -> tuple[Path, Path, str]:
    """Two copies of `bundles`: one without its first vector file (a prefix's .faiss file, else
    the store's first codes file), one with it truncated; and that file's name."""
    missing, truncated = work / "missing-vectors", work / "truncated-vectors"
    for copy in (missing, truncated):
        shutil.copytree(bundles, copy)
    version = (bundles / "CURRENT").read_text().strip()
    files = sorted(p.name for p in (bundles / version).glob("*.faiss"))
    codes = sorted(p.name for p in (bundles / version).glob("store_vectors*.npy"))
    name = files[0] if files else codes[0]
    (missing / version / name).unlink()
    with (truncated / version / name).open("r+b") as handle:
        handle.truncate(1000)
    return missing, truncated, name


def error_cases(work: Path, bundles: Path, busy_port: int, cache_without_encoder: Path) -> list:
    """Every case, against a servable `bundles` folder (damaged copies are made in `work`)."""
    missing, truncated, vectors = damaged_copies(bundles, work)
    serve = ("serve", "--port", "0", "--device", "cpu", "--bundles")
    cases = [
        Case("unknown option", ("search", "a dog", "--bogus"), "No such option: --bogus"),
        Case("unknown command", ("serch",), "No such command 'serch'"),
        Case("missing required option", ("serve",), "Missing option '--bundles'"),
        Case("bad number", ("search", "a dog", "--top-k", "many"), "'--top-k'"),
        Case("zero hits", ("search", "a dog", "--top-k", "0"), "'--top-k'"),
        Case("zero shard rows", ("embed", "run", "--out", str(work / "c"), "--shard-rows", "0"),
             "'--shard-rows'"),
        Case("zero batch size", ("embed", "run", "--out", str(work / "c"), "--batch-size", "0"),
             "'--batch-size'"),
        Case("zero versions kept", ("index", "delete", "--bundles", str(bundles), "--keep", "0"),
             "'--keep'"),
        Case("zero sparsity", ("train", "cedar", "--cache", str(work), "--out", str(work / "a"),
                               "--sparsity", "0"), "'--sparsity'"),
        Case("no query", ("search",), "give a text QUERY or --image FILE"),
        Case("missing image file", ("search", "--image", str(work / "nope.jpg")),
             "image file not found"),
        Case("no server", ("search", "a dog", "--target", "127.0.0.1:9", "--timeout", "2"),
             "no Strata server answers at 127.0.0.1:9"),
        Case("bundle folder missing", ("index", "info", "--bundles", str(work / "none")),
             "bundle directory not found"),
        Case("serve: vector file missing", (*serve, str(missing)), f"missing {vectors}"),
        Case("serve: vector file truncated", (*serve, str(truncated)), f"{vectors}: 1000 bytes"),
        Case("serve: busy port", ("serve", "--bundles", str(bundles), "--port", str(busy_port),
                                  "--device", "cpu"), "the port is in use"),
        Case("serve: unknown device", ("serve", "--bundles", str(bundles), "--port", "0",
                                       "--device", "tpu"), "unknown device 'tpu'"),
        Case("train cedar: cache without encoder",
             ("train", "cedar", "--cache", str(cache_without_encoder), "--out", str(work / "a")),
             "records no encoder"),
    ]  # fmt: skip
    if not cuda_available():
        cases.append(
            Case(
                "serve: --device cuda without CUDA",
                (*serve[:-3], "--bundles", str(bundles), "--device", "cuda"),
                "CUDA is not available",
            )
        )
    return cases


def run_case(case: Case) -> Outcome:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("GRPC_VERBOSITY", None)  # the command quiets gRPC's core log itself
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "service", *case.args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return Outcome(case, done.returncode, done.stderr, time.perf_counter() - began)


def listening_socket() -> socket.socket:
    """A TCP socket listening on a free port of 127.0.0.1 (the 'busy' port)."""
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    return busy


def cache_without_encoder(root: Path) -> Path:
    from training.synthetic import write_synthetic_cache

    return write_synthetic_cache(root, rows=64, dim=16, modality="text", encoder=None)
