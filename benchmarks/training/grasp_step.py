"""One GraSP-VL training step (all five terms, forward and backward, Cayley solve included) as
a ratio to one forward/backward of the alignment term alone, same batch, alternating.

    python -m benchmarks.training.grasp_step --views runs/grasp-views/<cache>.npz
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from benchmarks.harness import benchmark_parser, publish
from training.core.granularity import default_contract
from training.core.rotations import cayley
from training.grasp.config import GraspConfig, LossWeights
from training.grasp.data import GraspSet
from training.grasp.objective import linear_map, loss_terms, weighted_total


def step_seconds(upper: torch.Tensor, batch: dict, contract, config: GraspConfig) -> float:
    started = time.perf_counter()
    rotation = cayley(upper, batch["anchors"].shape[1])
    terms = loss_terms(linear_map(rotation), batch, contract, config, rotation)
    weighted_total(terms, config).backward()
    upper.grad = None
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--views", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", type=Path, default=Path("runs/bench/grasp_step.json"))
    args = parser.parse_args(argv)

    data = GraspSet.load(args.views)
    batch = {k: v[: args.batch_size] for k, v in data.tensors().items()}
    dim = data.anchors.shape[1]
    contract = default_contract(dim)
    upper = torch.zeros(dim * (dim - 1) // 2, requires_grad=True)
    full = GraspConfig()
    alone = GraspConfig(
        weights=LossWeights(alignment=1, retention=0, ranking=0, invariance=0, preservation=0)
    )
    for config in (full, alone):  # warm-up
        step_seconds(upper, batch, contract, config)
    full_times, alignment_times = [], []
    for _ in range(args.repeats):
        full_times.append(step_seconds(upper, batch, contract, full))
        alignment_times.append(step_seconds(upper, batch, contract, alone))
    result = {
        "benchmark": "grasp_step",
        "dim": dim,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "full_step_ms_median": 1000 * statistics.median(full_times),
        "alignment_only_ms_median": 1000 * statistics.median(alignment_times),
        "ratio": statistics.median(f / a for f, a in zip(full_times, alignment_times, strict=True)),
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
