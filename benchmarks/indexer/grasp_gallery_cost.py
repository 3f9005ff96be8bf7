"""Fitting GraSP-VL to a gallery, as a ratio to building the bundle's indexes on that gallery.

Both run in this one process, back to back, `--repeats` times alternating: `fit_grasp` with
`--gallery` (the gallery recipe; views and mined queries already embedded, so this is the fit
itself plus loading) and `build_bundle` of the gallery cache with the fitted rotation and a
CEDAR artifact. Reports the median of each and their ratio.

    python -m benchmarks.indexer.grasp_gallery_cost --cache runs/flickr8k-minilm \\
        --validation-split dev --gallery runs/flickr8k-test --cedar runs/cedar-flickr
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from benchmarks.harness import benchmark_parser, publish
from indexer.build.full import build_bundle
from indexer.build.inputs import BuildConfig
from training.core.cache import EmbeddingCache
from training.grasp.config import GALLERY_RECIPE
from training.grasp.fit import fit_grasp


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True, help="training cache with views")
    parser.add_argument("--validation-split", default="dev")
    parser.add_argument("--gallery", type=Path, required=True, help="cache of the gallery")
    parser.add_argument("--cedar", type=Path, required=True, help="CEDAR artifact for the build")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/grasp-gallery-cost"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/grasp_gallery_cost.json"))
    args = parser.parse_args(argv)

    config = GALLERY_RECIPE.model_copy(update={"validation_split": args.validation_split})
    fit_seconds, build_seconds = [], []
    for _ in range(args.repeats):
        shutil.rmtree(args.work, ignore_errors=True)
        grasp = args.work / "grasp"
        started = time.perf_counter()
        fit_grasp(args.cache, grasp, config, device="cpu", progress=False, gallery=args.gallery)
        fit_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        build_bundle(
            BuildConfig(
                cache=args.gallery,
                grasp=grasp,
                cedar=args.cedar,
                out=args.work / "bundles",
                progress=False,
            )
        )
        build_seconds.append(time.perf_counter() - started)
    fit, build = statistics.median(fit_seconds), statistics.median(build_seconds)
    return publish(
        {
            "gallery": str(args.gallery),
            "gallery_rows": EmbeddingCache.open(args.gallery).rows,
            "fit_seconds": fit_seconds,
            "build_seconds": build_seconds,
            "fit_over_build": fit / build,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
