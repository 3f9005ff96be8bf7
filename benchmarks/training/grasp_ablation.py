"""GraSP-VL ablation: train with each loss term switched off in turn, score all on one split.

    python -m benchmarks.training.grasp_ablation --views runs/grasp-views/<cache>.npz \
        --out runs/grasp-ablation

Uses an embedded views file (written by `strata train grasp` or `strata eval grasp`), so the
runs differ only in the loss weights. Prints and writes JSON and a Markdown table.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from benchmarks.harness import benchmark_parser, publish
from training.core.granularity import Granularity, default_contract
from training.grasp.config import TERMS, GraspConfig
from training.grasp.data import GraspSet
from training.grasp.evaluate import evaluate
from training.grasp.train import train_grasp


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--views", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("runs/grasp-ablation"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--validation-split", default="val")
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args(argv)

    data = GraspSet.load(args.views)
    test = data.of_split(args.split)
    contract = default_contract(data.anchors.shape[1])
    base = GraspConfig(epochs=args.epochs, validation_split=args.validation_split)
    variants = {"full": base}
    for term in TERMS:
        weights = base.weights.model_copy(update={term: 0.0})
        variants[f"without {term}"] = base.model_copy(update={"weights": weights})
    rows = {}
    for name, config in variants.items():
        with tempfile.TemporaryDirectory() as work:
            result = train_grasp(data, config, Path(work), progress=False)
        report = evaluate(result.artifact.apply, test, contract)
        rows[name] = {
            "selectivity": report["selectivity"],
            "staircase": report["staircase"],
            "drift": report["drift"],
            "object_r1_at_first_prefix": report["retrieval"]["object"][
                str(contract[Granularity.OBJECT])
            ]["R@1"],
            "epochs": result.epochs_run,
            "seconds": result.seconds,
        }
        print(name, json.dumps(rows[name]), flush=True)
    lines = [
        "| variant | selectivity | staircase | drift | object R@1 @D/16 | epochs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['selectivity']:.4f} | {r['staircase']:.2f} | {r['drift']:.1e} "
            f"| {r['object_r1_at_first_prefix']:.3f} | {r['epochs']} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.md").write_text("\n".join(lines) + "\n")
    return publish(
        {"views": str(args.views), "split": args.split, "variants": rows},
        args.out / "ablation.json",
    )


if __name__ == "__main__":
    main()
