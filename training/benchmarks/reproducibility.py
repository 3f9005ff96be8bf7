"""The same seed, the same model: every trained transform twice from one seed, then on simulated
other machines.

On a small compositional corpus embedded with MiniLM (made here, once), the real commands run
in subprocesses, each variant in its own folder:

- `strata train grasp` (the default recipe) and `strata train grasp --gallery` (the gallery
  recipe), `strata train cedar`, `strata train cosae` (its synthetic pair), one SAE baseline
  (`strata eval cedar --baselines topk`), all with `--seed`;
- `strata demo --scenes ... --seed` (reference runs only: it embeds its own corpus), whose
  bundle's data files (FAISS indexes, postings, ids; not the manifests, which hold times) are
  hashed.

Variants: the reference environment twice ("run 1", "run 2"), then "machines" simulated by the
environment: torch's own kernels at the baseline instruction set (ATEN_CPU_CAPABILITY=default),
MKL's at SSE4.2 (MKL_ENABLE_INSTRUCTIONS), numpy's OpenBLAS at another core type
(OPENBLAS_CORETYPE), and 1 or 4 threads (OMP_NUM_THREADS, MKL_NUM_THREADS,
OPENBLAS_NUM_THREADS). Every variant reads the same cache and the same embedded views (made by
run 1), so only training differs. For each transform and variant: the sha256 of the weights
file, whether it equals run 1's, the largest absolute difference of any weight from run 1's,
and what follows downstream (epochs run, the best epoch, validation scores, names).

    python -m training.benchmarks.reproducibility --json runs/bench/reproducibility.json
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from training.benchmarks import benchmark_parser, publish

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


def strata(args: list[str], env: dict[str, str], runs: Path) -> str:
    """Run `strata ARGS` in a subprocess with `env` laid over ours; its stdout."""
    full = {**os.environ, **env, "STRATA_RUNS_DIR": str(runs), "STRATA_LOG_LEVEL": "WARNING",
            "HF_HUB_OFFLINE": "1", "STRATA_DEVICE": "cpu"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "service", *args], capture_output=True, text=True, env=full
    )
    if done.returncode != 0:
        raise SystemExit(f"strata {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


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
        return sha256(path.read_bytes())
    from safetensors.numpy import save

    return sha256(save({n: np.ascontiguousarray(v) for n, v in tensors(path).items()}))


def max_difference(a: Path, b: Path) -> float:
    first, second = tensors(a), tensors(b)
    return max(
        float(np.abs(first[n].astype(np.float64) - second[n].astype(np.float64)).max())
        for n in first
    )


def epochs_line(output: str) -> dict[str, int]:
    """`epochs       N run, best M` of a train command's report."""
    found = re.search(r"epochs\s+(\d+) run, best (\d+)", output)
    return {"epochs_run": int(found[1]), "best_epoch": int(found[2])} if found else {}


def train_variant(
    folder: Path, env: dict[str, str], cache: Path, args: Any, demo: bool
) -> dict[str, dict[str, Any]]:
    """Every transform once under `env`; per transform its weights file and downstream facts."""
    seed = str(args.seed)
    runs = args.work / "runs"  # shared: the embedded views, mined queries and query bank
    views = ["--views", str(args.work / "views.npz")]
    common = ["--seed", seed, "--device", "cpu", "--no-progress"]
    shutil.rmtree(folder, ignore_errors=True)  # a fresh run: no checkpoint to resume, no SAE kept
    out: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for name, extra in (("grasp", []), ("grasp-gallery", ["--gallery", str(cache)])):
        target = folder / name
        text = strata(["train", "grasp", "--cache", str(cache), "--out", str(target), *views,
                       "--epochs", str(args.grasp_epochs), *extra, *common], env, runs)  # fmt: skip
        manifest = json.loads((target / "manifest.json").read_text())
        best = manifest["metrics"]["validation"]
        out[name] = {"weights": target / "weights.safetensors", **epochs_line(text),
                     "val_score": round(best["val_score"], 6)}  # fmt: skip
    target = folder / "cedar"
    text = strata(["train", "cedar", "--cache", str(cache), "--out", str(target),
                   "--epochs", str(args.cedar_epochs), *common], env, runs)  # fmt: skip
    manifest = json.loads((target / "manifest.json").read_text())
    catalog = manifest["extra"]["catalog"]
    out["cedar"] = {
        "weights": target / "weights.safetensors", **epochs_line(text),
        "val_fvu": round(next(v for k, v in manifest["metrics"]["validation"].items()
                              if k.startswith("val_fvu")), 6),
        "named": sum(1 for e in catalog if e["named"]),
        "names": sha256(json.dumps([e["name"] for e in catalog]).encode())[:16],
    }  # fmt: skip
    target = folder / "cosae"
    strata(["train", "cosae", "--out", str(target), "--rows", str(args.cosae_rows),
            "--steps", str(args.cosae_steps), *common], env, runs)  # fmt: skip
    manifest = json.loads((target / "manifest.json").read_text())
    out["cosae"] = {"weights": target / "weights.safetensors",
                    "test_fvu_i": round(manifest["metrics"]["test"]["fvu_i"], 6)}  # fmt: skip
    report = folder / "sae"
    strata(["eval", "cedar", "--cache", str(cache), "--out", str(report), "--baselines", "topk",
            "--sae-epochs", str(args.sae_epochs), "--ks", "8,32", "--seed", seed,
            "--no-progress"], env, runs)  # fmt: skip
    (saved,) = (report / "saes").glob("topk-*.pt")
    fvu = json.loads((report / "report.json").read_text())["methods"]["topk-sae"]["fvu"]
    out["topk-sae"] = {"weights": saved, "test_fvu_k32": round(fvu["32"], 6)}
    if demo:
        target = folder / "demo"
        strata(["demo", "--out", str(target), "--scenes", str(args.demo_scenes),
                "--grasp-epochs", "2", "--cedar-epochs", "2", "--seed", seed,
                "--no-progress"], env, runs)  # fmt: skip
        out["demo"] = {"files": bundle_files(target)}
    print(f"{folder.name}: {time.perf_counter() - started:.0f} s", flush=True)
    return out


def bundle_files(demo: Path) -> dict[str, str]:
    """sha256 of every data file of the demo's GraSP-VL and CEDAR weights and of its published
    bundle version (FAISS indexes, postings, ids); manifests and pointers hold times and are
    left out."""
    digests = {
        f"{role}/weights.safetensors": sha256((demo / f"{role}-compositional" /
                                               "weights.safetensors").read_bytes())
        for role in ("grasp", "cedar")
    }  # fmt: skip
    bundles = demo / "bundles-compositional"
    for path in sorted(p for p in bundles.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(bundles)
        if "manifest" in path.name or len(relative.parts) < 2 or path.suffix == ".json":
            continue
        digests["bundle/" + "/".join(relative.parts[1:])] = sha256(path.read_bytes())
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
            digest = weights_digest(run["weights"])
            facts = {k: v for k, v in run.items() if k != "weights"}
            rows[variant] = {
                "sha256": digest,
                "equal": digest == weights_digest(ref["weights"]),
                "max_abs_diff": max_difference(ref["weights"], run["weights"]),
                **facts,
            }
        table[transform] = rows
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/reproducibility"))
    parser.add_argument("--scenes", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grasp-epochs", type=int, default=4)
    parser.add_argument("--cedar-epochs", type=int, default=8)
    parser.add_argument("--sae-epochs", type=int, default=4)
    parser.add_argument("--cosae-rows", type=int, default=2000)
    parser.add_argument("--cosae-steps", type=int, default=200)
    parser.add_argument("--demo-scenes", type=int, default=600)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/reproducibility.json"))
    args = parser.parse_args(argv)
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
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
            buffer.write(f"{transform:<14} {variant:<18} {shown:<16} equal={row['equal']!s:<5} "
                         + (f"max|Δ|={diff:.3g} " if diff is not None else "")
                         + " ".join(f"{k}={v}" for k, v in row.items()
                                    if k in ("epochs_run", "best_epoch", "named"))
                         + "\n")  # fmt: skip
    print(buffer.getvalue(), flush=True)
    return publish(result, args.json)


if __name__ == "__main__":
    main()
