"""A ceiling for gallery-fitted granularity: what one rotation can reach when it is supervised by
the test gallery's own distribution.

The gallery split's images are cut in two halves (seeded). Queries are mined from half A (at
least 3 relevant rows) and a rotation R = Cayley(A)·R₀ is fitted with the retrieval term on A's
rows and the distillation term on B's rows (A's query texts), no GraSP-VL term; R₀ is B's
centred principal axes. Half B's own mined queries (the benchmark's 10 relevant rows) then
score it beside truncation, the PCAs of B, and any given artifacts, with the benchmark's code.
No real deployment has these labels: it bounds what the gallery recipe could reach.

    python -m benchmarks.training.grasp_gallery_ceiling --cache runs/flickr8k-minilm \\
        --split test --artifact runs/grasp-in
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_parser, publish
from training.core.artifacts import TransformArtifact
from training.core.cache import EmbeddingCache
from training.core.encoders import load_encoder
from training.core.granularity import default_contract
from training.core.rotations import centred_principal_axes, pca_rotation
from training.grasp.config import GraspConfig, LossWeights
from training.grasp.fit import grasp_set
from training.grasp.gallery import gallery_retrieval, gallery_table, retrieval_task
from training.grasp.objective import GalleryFit
from training.grasp.train import train_grasp

SUPERVISED_ONLY = LossWeights(
    alignment=0, retention=0, ranking=0, invariance=0, preservation=0, retrieval=1, distillation=1
)


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cache", type=Path, required=True, help="Flickr-style caption cache")
    parser.add_argument("--split", default="test")
    parser.add_argument("--artifact", type=Path, action="append", default=[])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/grasp-ceiling.work"))
    parser.add_argument("--json", type=Path, default=Path("runs/bench/grasp_gallery_ceiling.json"))
    args = parser.parse_args(argv)

    cache = EmbeddingCache.open(args.cache)
    metadata = cache.metadata()
    split = np.array(metadata.column("split").to_pylist())
    rows = np.flatnonzero(split == args.split)
    groups = np.array(metadata.column("group").to_pylist())[rows]
    every_caption = metadata.column("caption").to_pylist()
    captions = [every_caption[i] for i in rows]
    images = np.unique(groups)
    half_a = set(np.random.default_rng(args.seed).permutation(images)[: len(images) // 2])
    in_a = np.array([g in half_a for g in groups])
    vectors = np.asarray(cache.embeddings("text")[rows], dtype=np.float32)
    encoder = load_encoder(cache.manifest.encoder, device="cpu")

    def task(mask: np.ndarray, min_relevant: int):
        picked = np.flatnonzero(mask)
        return retrieval_task(
            vectors[picked],
            [captions[i] for i in picked],
            list(groups[picked]),
            encoder.encode_text,
            min_relevant,
        )

    task_a, task_b = task(in_a, 3), task(~in_a, 10)
    data, _ = grasp_set(args.cache, None, None)
    config = GraspConfig(
        learning_rate=3e-3,
        epochs=args.epochs,
        patience=4,
        validation_split="dev",
        weights=SUPERVISED_ONLY,
    )
    fit = GalleryFit(task_b.rows, task_a, task_a, dict(task_a.embedded))
    started = time.perf_counter()
    ceiling = train_grasp(data, config, args.work, progress=False, device="cpu", fit=fit)
    seconds = time.perf_counter() - started
    contract = default_contract(cache.dim)
    rotations = {
        "identity": np.eye(cache.dim),
        "pca-gallery (B)": pca_rotation(task_b.rows),
        "pca-gallery-centred (B)": centred_principal_axes(task_b.rows),
        "ceiling (supervised on A)": ceiling.artifact.rotation,
    }
    transforms = {name: (lambda x, r=r: x @ r.T) for name, r in rotations.items()}
    for path in args.artifact:
        transforms[path.name] = TransformArtifact.load(path).apply
    reports = {
        name: gallery_retrieval(f, task_b.pairs(), task_b.rows, contract)
        for name, f in transforms.items()
    }
    print(gallery_table(reports, contract))
    return publish(
        {
            "cache": str(args.cache),
            "split": args.split,
            "images": {"A": len(half_a), "B": len(images) - len(half_a)},
            "queries": {"A": task_a.counts(), "B": task_b.counts()},
            "ceiling_training_seconds": seconds,
            "methods": reports,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
