"""The same seed, the same model: every trained transform twice from one seed, then on simulated
other machines.

On a small compositional corpus embedded with MiniLM (made here, once), each variant runs in
its own subprocess and folder:

- the functions of `strata train grasp` (the default recipe) and `strata train grasp --gallery`
  (the gallery recipe), `strata train cedar`, `strata train cosae` (its synthetic pair), and
  one SAE baseline as `strata eval cedar --baselines topk` trains it, all with the seed;
- `strata demo --scenes ... --seed` (reference runs only: it embeds its own corpus), whose
  GraSP-VL and CEDAR weights and bundle data files (FAISS indexes, postings, ids; not the
  manifests, which hold times) are hashed.

Variants: the reference environment twice ("run 1", "run 2"), then "machines" simulated by the
environment: torch's own kernels at the baseline instruction set (ATEN_CPU_CAPABILITY=default),
MKL's at SSE4.2 (MKL_ENABLE_INSTRUCTIONS), numpy's OpenBLAS at another core type
(OPENBLAS_CORETYPE), and 1 or 4 threads (OMP_NUM_THREADS, MKL_NUM_THREADS,
OPENBLAS_NUM_THREADS). Every variant reads the same cache and the same embedded views (made by
run 1), so only training differs. For each transform and variant: the sha256 of the weights
file, whether it equals run 1's, the largest absolute difference of any weight from run 1's,
and what follows downstream (epochs run, the best epoch, validation scores, names).

    python -m benchmarks.training.reproducibility --json runs/bench/reproducibility.json
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from training.core.files import sha256_file

VARIANTS: dict[str, dict[str, str]] = {
    "run 1": {},
    "run 2": {},
    "aten default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl sse4.2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "openblas prescott": {"OPENBLAS_CORETYPE": "Prescott"},
    "1 thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    "4 threads": {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4"},
}
REFERENCE = "run 1"
WITH_DEMO = ("run 1", "run 2")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensors(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a weights file: safetensors, or an SAE's torch.save (its "state")."""
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        return load_file(str(path))
    import torch

    state = torch.load(path, weights_only=True)["state"]
    return {name: value.numpy() for name, value in state.items()}


def weights_digest(path: Path) -> str:
    """sha256 of the weights file; of an SAE's state as safetensors (its .pt also holds the
    training time)."""
    if path.suffix == ".safetensors":
        return sha256_file(path)
    from safetensors.numpy import save

    return sha256(save({n: np.ascontiguousarray(v) for n, v in tensors(path).items()}))


def max_difference(a: Path, b: Path) -> float:
    first, second = tensors(a), tensors(b)
    return max(
        float(np.abs(first[n].astype(np.float64) - second[n].astype(np.float64)).max())
        for n in first
    )


def run_once(folder: Path, cache: Path, args: Any) -> dict[str, dict[str, Any]]:
    """Every transform once, in this process, through the train commands' own functions (their
    options as the command line gives them, `--seed` included); per transform its weights file
    and what follows downstream."""
    from training.cedar.cli import train_command as train_cedar_command
    from training.cedar.cli import trained_sae
    from training.cedar.data import load_split_rows
    from training.cosae.cli import train_command as train_cosae_command
    from training.grasp.cli import train_command as train_grasp_command
    from training.sae.config import SaeConfig

    shutil.rmtree(folder, ignore_errors=True)  # a fresh run: no checkpoint to resume, no SAE kept
    folder.mkdir(parents=True)
    out: dict[str, dict[str, Any]] = {}
    for name, gallery in (("grasp", None), ("grasp-gallery", cache)):
        target = folder / name
        train_grasp_command(
            cache,
            target,
            epochs=args.grasp_epochs,
            seed=args.seed,
            views=args.work / "views.npz",
            device="cpu",
            progress=False,
            gallery=gallery,
        )
        manifest = json.loads((target / "manifest.json").read_text())
        best = manifest["metrics"]["validation"]
        out[name] = {
            "weights": str(target / "weights.safetensors"),
            "best_epoch": best["epoch"],
            "val_score": round(best["val_score"], 6),
        }
    config = folder / "cedar.json"
    config.write_text(json.dumps({"batch_size": 256}))
    target = folder / "cedar"
    train_cedar_command(
        cache,
        target,
        config=config,
        epochs=args.cedar_epochs,
        seed=args.seed,
        device="cpu",
        progress=False,
    )
    manifest = json.loads((target / "manifest.json").read_text())
    catalog = manifest["extra"]["catalog"]
    metrics = manifest["metrics"]
    out["cedar"] = {
        "weights": str(target / "weights.safetensors"),
        "epochs_run": metrics["epochs_run"],
        "best_epoch": metrics["validation"]["epoch"],
        "val_fvu": round(
            next(v for k, v in metrics["validation"].items() if k.startswith("val_fvu")), 6
        ),
        "named": sum(1 for e in catalog if e["named"]),
        "names": sha256(json.dumps([e["name"] for e in catalog]).encode())[:16],
    }
    target = folder / "cosae"
    train_cosae_command(
        target,
        rows=args.cosae_rows,
        steps=args.cosae_steps,
        concepts=128,
        k=4,
        seed=args.seed,
        device="cpu",
        progress=False,
    )
    manifest = json.loads((target / "manifest.json").read_text())
    out["cosae"] = {
        "weights": str(target / "weights.safetensors"),
        "test_fvu_i": round(manifest["metrics"]["test"]["fvu_i"], 6),
    }
    data = load_split_rows(cache)  # as `strata eval cedar --baselines topk --seed` trains it
    x, train, val = data.embeddings, data.rows("train"), data.rows("val")
    sae = SaeConfig(kind="topk", k=32, k_range=(4, 128), epochs=args.sae_epochs, seed=args.seed)
    trained_sae(sae, x[train], x[val], folder / "saes", progress=False)
    (saved,) = (folder / "saes").glob("topk-*.pt")
    out["topk-sae"] = {"weights": str(saved)}
    return out


def train_variant(
    folder: Path, env: dict[str, str], cache: Path, args: Any, demo: bool
) -> dict[str, dict[str, Any]]:
    """`run_once` in a subprocess under `env` (a simulated machine), and with `demo` the demo
    twice-comparable: `strata demo --seed` on its own small corpus, its bundle hashed."""
    started = time.perf_counter()
    runs = args.work / "runs"  # shared: the embedded views, mined queries and query bank
    full = {
        **os.environ,
        **env,
        "STRATA_RUNS_DIR": str(runs),
        "STRATA_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        "STRATA_DEVICE": "cpu",
    }
    options = [
        "--work",
        str(args.work),
        "--seed",
        str(args.seed),
        "--grasp-epochs",
        str(args.grasp_epochs),
        "--cedar-epochs",
        str(args.cedar_epochs),
        "--sae-epochs",
        str(args.sae_epochs),
        "--cosae-rows",
        str(args.cosae_rows),
        "--cosae-steps",
        str(args.cosae_steps),
        "--scenes",
        str(args.scenes),
    ]
    command = [
        sys.executable,
        "-m",
        "benchmarks.training.reproducibility",
        "--worker",
        str(folder),
        *options,
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=full)
    if done.returncode != 0:
        raise SystemExit(f"{folder.name} failed:\n{done.stderr[-3000:]}")
    out = json.loads((folder / "facts.json").read_text())
    if demo:
        target = folder / "demo"
        demo_args = [
            "demo",
            "--out",
            str(target),
            "--scenes",
            str(args.demo_scenes),
            "--grasp-epochs",
            "2",
            "--cedar-epochs",
            "2",
            "--seed",
            str(args.seed),
            "--no-progress",
        ]
        alone = {**full, "STRATA_DATA_DIR": str(args.work / "no-data")}  # the compositional set
        shown = subprocess.run(
            [sys.executable, "-m", "service", *demo_args], capture_output=True, text=True, env=alone
        )
        if shown.returncode != 0:
            raise SystemExit(f"strata demo failed:\n{shown.stderr[-3000:]}")
        out["demo"] = {"files": bundle_files(target)}
    print(f"{folder.name}: {time.perf_counter() - started:.0f} s", flush=True)
    return out


def bundle_files(demo: Path) -> dict[str, str]:
    """sha256 of every data file of the demo's GraSP-VL and CEDAR weights and of its published
    bundle version (FAISS indexes, postings, ids); manifests and pointers hold times and are
    left out."""
    digests = {
        f"{role}/weights.safetensors": sha256_file(
            demo / f"{role}-compositional" / "weights.safetensors"
        )
        for role in ("grasp", "cedar")
    }
    bundles = demo / "bundles-compositional"
    for path in sorted(p for p in bundles.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(bundles)
        if "manifest" in path.name or len(relative.parts) < 2 or path.suffix == ".json":
            continue
        digests["bundle/" + "/".join(relative.parts[1:])] = sha256_file(path)
    return digests


def make_cache(path: Path, scenes: int) -> Path:
    """The compositional corpus (`scenes`, seed 0) embedded with MiniLM, made once."""
    from training.core.encoders import load_encoder
    from training.corpora.compositional import CompositionalCorpus
    from training.embedding.job import EmbedConfig, embed_corpus

    encoder = load_encoder("minilm", device="cpu")
    embed_corpus(CompositionalCorpus(scenes=scenes), encoder, path, EmbedConfig(progress=False))
    return path


def compare(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per transform and variant: the digest, equal to the reference's, the largest weight
    difference from it, and the downstream facts."""
    reference = results[REFERENCE]
    table: dict[str, Any] = {}
    for transform, ref in reference.items():
        rows: dict[str, Any] = {}
        for variant, runs in results.items():
            if transform not in runs:
                continue
            run = runs[transform]
            if transform == "demo":
                differ = sorted(n for n, d in run["files"].items() if ref["files"].get(n) != d)
                rows[variant] = {"files": run["files"], "equal": not differ, "differ": differ}
                continue
            digest = weights_digest(Path(run["weights"]))
            facts = {k: v for k, v in run.items() if k != "weights"}
            rows[variant] = {
                "sha256": digest,
                "equal": digest == weights_digest(Path(ref["weights"])),
                "max_abs_diff": max_difference(Path(ref["weights"]), Path(run["weights"])),
                **facts,
            }
        table[transform] = rows
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/reproducibility"))
    parser.add_argument("--scenes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grasp-epochs", type=int, default=3)
    parser.add_argument("--cedar-epochs", type=int, default=6)
    parser.add_argument("--sae-epochs", type=int, default=3)
    parser.add_argument("--cosae-rows", type=int, default=2000)
    parser.add_argument("--cosae-steps", type=int, default=200)
    parser.add_argument("--demo-scenes", type=int, default=200)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/reproducibility.json"))
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # one variant's run
    args = parser.parse_args(argv)
    if args.worker is not None:
        cache = args.work / "cache-minilm"
        facts = run_once(args.worker, cache, args)
        (args.worker / "facts.json").write_text(json.dumps(facts, indent=2) + "\n")
        return facts
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if REFERENCE not in chosen:
        chosen.insert(0, REFERENCE)
    started = time.perf_counter()
    cache = make_cache(args.work / "cache-minilm", args.scenes)
    results = {}
    for variant in chosen:
        folder = args.work / variant.replace(" ", "-")
        results[variant] = train_variant(
            folder, VARIANTS[variant], cache, args, variant in WITH_DEMO
        )
    import torch

    result = {
        "benchmark": "reproducibility",
        "seed": args.seed,
        "scenes": args.scenes,
        "machine": {
            "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "numpy": np.__version__,
        },
        "variants": {v: VARIANTS[v] for v in chosen},
        "transforms": compare(results),
        "seconds": round(time.perf_counter() - started, 1),
    }
    buffer = io.StringIO()
    for transform, rows in result["transforms"].items():
        for variant, row in rows.items():
            shown = row.get("sha256", "")[:16]
            diff = row.get("max_abs_diff")
            buffer.write(
                f"{transform:<14} {variant:<18} {shown:<16} equal={row['equal']!s:<5} "
                + (f"max|Δ|={diff:.3g} " if diff is not None else "")
                + " ".join(
                    f"{k}={v}" for k, v in row.items() if k in ("epochs_run", "best_epoch", "named")
                )
                + "\n"
            )
    print(buffer.getvalue(), flush=True)
    return publish(result, args.json)


if __name__ == "__main__":
    main()
