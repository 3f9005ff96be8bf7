"""CEDAR's training time against the TopK SAE's on the same rows, at the same target k.

Both train for the same number of epochs (no early stopping: patience = epochs) on the same
rows with the same batch size; CEDAR at a fixed k (no curriculum, k_min = k = k_max), the SAE
with an 8x dictionary at the same k. Runs alternate (CEDAR, SAE, CEDAR, SAE, ...) so a slow
spell of this shared machine hits both; the figure is the median of the per-pair ratios.

    python -m benchmarks.training.cedar_vs_sae --cache runs/bench/flickr-minilm
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.harness import benchmark_parser, publish
from training.cedar.data import load_split_rows
from training.cedar.train import CedarConfig, train_cedar
from training.sae.config import SaeConfig
from training.sae.train import train_sae


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/cedar_vs_sae.json"))
    args = parser.parse_args(argv)

    data = load_split_rows(args.cache)
    x = data.embeddings
    val = x[data.rows("val")][:2000]
    cedar_config = CedarConfig(
        k=args.k,
        k_min=args.k,
        k_max=args.k,
        curriculum_epochs=0,
        epochs=args.epochs,
        patience=args.epochs,
    )
    sae_config = SaeConfig(kind="topk", k=args.k, epochs=args.epochs, patience=args.epochs)
    cedar_times, sae_times, fvus = [], [], {}
    for _ in range(args.pairs):
        started = time.perf_counter()
        cedar = train_cedar(x, val, cedar_config, device="cpu", progress=False)
        cedar_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        _, history = train_sae(x, val, sae_config, progress=False)
        sae_times.append(time.perf_counter() - started)
        fvus = {
            "cedar": cedar.history[-1][f"val_fvu_k{args.k}"],
            "topk_sae": history[-1]["val_fvu"],
        }
    result = {
        "benchmark": "cedar_vs_sae",
        "rows": len(x),
        "dim": int(x.shape[1]),
        "k": args.k,
        "epochs": args.epochs,
        "sae_latents": sae_config.expansion * int(x.shape[1]),
        "cedar_seconds": cedar_times,
        "topk_sae_seconds": sae_times,
        "ratio_cedar_to_sae": statistics.median(
            c / s for c, s in zip(cedar_times, sae_times, strict=True)
        ),
        "val_fvu_after_epochs": fvus,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
