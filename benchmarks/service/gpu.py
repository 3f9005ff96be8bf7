"""The GPU path in one prepared script: every figure as a ratio to the same work on the CPU, in
the same run.

    python -m benchmarks.service.gpu                         # on a CUDA machine: the full run
    python -m benchmarks.service.gpu --device cpu --quick    # a dry run of every section here

Sections (each reports its own figures, or why it was skipped):
- encode: open_clip ViT-B-32 (random weights: throughput does not depend on them, and the
  machine needs no network) text and image encoding, fp16 on the device against fp32 on the
  CPU; texts / s and images / s, and their ratio;
- flat: exact inner-product search over N synthetic rows (variance λ_j ∝ 1/j, as a learned
  rotation orders it: training/synthetic.py) at D/16 and at D: FAISS's GPU Flat
  where this FAISS has GPUs (else torch's matmul + top-k on the device, said as such),
  against FAISS's CPU Flat; the median of
  interleaved single-query rounds and the throughput of a 256-query batch;
- funnel: the engine's funnel (indexer/format/funnel.py: shortlist k·F at D/16, rerank exactly at D)
  with the shortlist on the device against the same on the CPU; recall@10 against exact D;
- server: a live `strata serve`-equivalent server (service/api/server.py) whose query encoder runs
  on the device (MiniLM, as `--device cuda` does) against one on the CPU, at concurrency 1:
  median latency of interleaved rounds.

With `--device cpu` both arms run on the CPU (ratios near 1): that checks the script, not a GPU.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import benchmark_parser, interleaved, publish
from training.core.errors import InputError
from training.synthetic import spectrum_rows

K = 10


def device_sync(device: str) -> Callable[[], None]:
    """What makes a timing include the device's queued work (a no-op on the CPU)."""
    if not device.startswith("cuda"):
        return lambda: None
    import torch

    return torch.cuda.synchronize


def encode_section(device: str, texts: int, images: int, rounds: int) -> dict[str, Any]:
    """open_clip ViT-B-32 text and image throughput: fp16 on `device` against fp32 on the CPU."""
    import open_clip
    import torch

    words = [
        "a",
        "dog",
        "runs",
        "on",
        "the",
        "beach",
        "with",
        "a",
        "red",
        "ball",
        "near",
        "two",
        "children",
    ]
    batch_texts = [" ".join(words[: 3 + i % 9]) for i in range(texts)]
    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    result: dict[str, Any] = {"model": "ViT-B-32 (random weights)", "texts": texts}
    result["images"] = images
    for name, where, dtype in (("device", device, torch.float16), ("cpu", "cpu", torch.float32)):
        if name == "device" and not device.startswith("cuda"):
            dtype = torch.float32  # fp16 matmuls on a CPU measure nothing useful
        model = open_clip.create_model("ViT-B-32", pretrained=None).to(where, dtype).eval()
        tokens = tokenizer(batch_texts).to(where)
        pixels = torch.randn(images, 3, 224, 224, device=where, dtype=dtype)
        sync = device_sync(where)

        def run_text(_: int, model=model, tokens=tokens, sync=sync) -> None:
            with torch.inference_mode():
                model.encode_text(tokens)
            sync()

        def run_image(_: int, model=model, pixels=pixels, sync=sync) -> None:
            with torch.inference_mode():
                model.encode_image(pixels)
            sync()

        medians = interleaved({"text": run_text, "image": run_image}, 1, rounds)
        result[name] = {
            "dtype": str(dtype).removeprefix("torch."),
            "texts_per_s": texts / medians["text"],
            "images_per_s": images / medians["image"],
        }
    result["ratio_text"] = result["device"]["texts_per_s"] / result["cpu"]["texts_per_s"]
    result["ratio_image"] = result["device"]["images_per_s"] / result["cpu"]["images_per_s"]
    return result


class DeviceFlat:
    """Exact inner-product search on the device: FAISS's GPU Flat when this FAISS has GPUs,
    else torch (rows resident on the device, matmul + top-k). `kind` says which."""

    def __init__(self, vectors: np.ndarray, device: str) -> None:
        import faiss

        self.ntotal = len(vectors)
        self.device = device
        gpus = faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0
        if device.startswith("cuda") and gpus > 0:
            self.kind = "faiss-gpu"
            self._resources = faiss.StandardGpuResources()
            cpu = faiss.IndexFlatIP(vectors.shape[1])
            cpu.add(vectors)
            number = int(device.partition(":")[2] or 0)
            self._index = faiss.index_cpu_to_gpu(self._resources, number, cpu)
            return
        if device.startswith("cuda"):
            import torch

            self.kind = "torch-cuda"
            self._rows = torch.from_numpy(vectors).to(device, torch.float16)
            return
        self.kind = "faiss-cpu"
        self._index = faiss.IndexFlatIP(vectors.shape[1])
        self._index.add(vectors)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.kind != "torch-cuda":
            return self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        import torch

        q = torch.from_numpy(np.ascontiguousarray(queries)).to(self.device, torch.float16)
        scores, rows = torch.topk(q @ self._rows.T, k, dim=1)
        return scores.float().cpu().numpy(), rows.cpu().numpy()


def flat_section(
    rotated: np.ndarray, queries: np.ndarray, device: str, rounds: int
) -> dict[str, Any]:
    """Single-query latency and 256-query throughput at D/16 and D, device against CPU."""
    import faiss

    from training.core.metrics import prefix_vectors

    dim = rotated.shape[1]
    result: dict[str, Any] = {"rows": len(rotated), "dim": dim}
    for length in (dim // 16, dim):
        stored = prefix_vectors(rotated, length)
        asked = prefix_vectors(queries, length)
        cpu = faiss.IndexFlatIP(length)
        cpu.add(stored)
        on_device = DeviceFlat(stored, device)
        one = [asked[i : i + 1] for i in range(min(len(asked), 16))]
        single = interleaved(
            {
                "device": lambda i, d=on_device, q=one: d.search(q[i], K),
                "cpu": lambda i, c=cpu, q=one: c.search(q[i], K),
            },
            len(one),
            rounds,
        )
        batch = interleaved(
            {
                "device": lambda _, d=on_device, q=asked: d.search(q, K),
                "cpu": lambda _, c=cpu, q=asked: c.search(q, K),
            },
            1,
            max(1, rounds // 2),
        )
        result[f"prefix_{length}"] = {
            "device_kind": on_device.kind,
            "single_ms": {name: 1000 * s for name, s in single.items()},
            "single_speedup": single["cpu"] / single["device"],
            "batch_qps": {name: len(asked) / s for name, s in batch.items()},
            "batch_speedup": batch["cpu"] / batch["device"],
        }
    return result


def funnel_section(
    rotated: np.ndarray, queries: np.ndarray, device: str, rounds: int, factor: int
) -> dict[str, Any]:
    """The engine's funnel (shortlist k·F at D/16, exact rerank at D from the full-D Flat rows)
    with the shortlist on the device against the CPU; recall@10 against exact D."""
    import faiss

    from indexer.format.funnel import ExactRows, funnel_search
    from training.core.metrics import neighbour_recall, prefix_vectors

    dim = rotated.shape[1]
    short = dim // 16
    full = faiss.IndexFlatIP(dim)
    full.add(prefix_vectors(rotated, dim))
    exact = ExactRows.of(full, dim)
    assert exact is not None
    cpu_short = faiss.IndexFlatIP(short)
    cpu_short.add(prefix_vectors(rotated, short))
    device_short = DeviceFlat(prefix_vectors(rotated, short), device)
    _, truth = full.search(prefix_vectors(queries, dim), K)
    arms = {"device": device_short, "cpu": cpu_short}
    found = {
        name: funnel_search(index, short, exact, queries, dim, K, factor)[1]
        for name, index in arms.items()
    }
    one = [queries[i : i + 1] for i in range(min(len(queries), 16))]
    medians = interleaved(
        {
            name: (
                lambda i, index=index: funnel_search(index, short, exact, one[i], dim, K, factor)
            )
            for name, index in arms.items()
        }
        | {"cpu_full_flat": lambda i: full.search(prefix_vectors(one[i], dim), K)},
        len(one),
        rounds,
    )
    return {
        "shortlist_prefix": short,
        "factor": factor,
        "device_kind": device_short.kind,
        "recall_at_10": {name: neighbour_recall(rows, truth) for name, rows in found.items()},
        "single_ms": {name: 1000 * s for name, s in medians.items()},
        "speedup_over_cpu_funnel": medians["cpu"] / medians["device"],
        "speedup_over_cpu_full_flat": medians["cpu_full_flat"] / medians["device"],
    }


def server_section(device: str, rows: int, rounds: int) -> dict[str, Any]:
    """Served search latency at concurrency 1 with the query encoder (MiniLM) on `device`
    against one on the CPU: two live servers over one synthetic bundle, interleaved rounds."""
    from benchmarks.service.load import QUERIES, build_gallery
    from indexer.format.bundle import Bundle
    from service.api.background import BackgroundServer
    from service.api.grpc.client import StrataClient
    from service.api.server import ServerConfig
    from service.engine.search import SearchEngine
    from training.core.encoders import load_encoder

    with tempfile.TemporaryDirectory(prefix="strata-gpu-") as folder:
        bundles = build_gallery(Path(folder), rows, 384)
        engines = {
            name: SearchEngine(Bundle.open(bundles), load_encoder("minilm", device=where))
            for name, where in (("device", device), ("cpu", "cpu"))
        }
        with (
            BackgroundServer(engines["device"], ServerConfig(port=0)) as on_device,
            BackgroundServer(engines["cpu"], ServerConfig(port=0)) as on_cpu,
            StrataClient(on_device.target) as device_client,
            StrataClient(on_cpu.target) as cpu_client,
        ):
            medians = interleaved(
                {
                    "device": lambda i: device_client.search(QUERIES[i % len(QUERIES)]),
                    "cpu": lambda i: cpu_client.search(QUERIES[i % len(QUERIES)]),
                },
                len(QUERIES),
                rounds,
            )
    return {
        "rows": rows,
        "encoder": "minilm",
        "p50_ms": {name: 1000 * s for name, s in medians.items()},
        "speedup": medians["cpu"] / medians["device"],
    }


def check_device(device: str) -> None:
    """A CUDA device must be there when asked for (one line, not a traceback)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(
                f"--device {device}: no CUDA device here (run with --device cpu for a dry run)"
            )


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:1, or cpu (a dry run)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the flat section")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--texts", type=int, default=1024, help="texts per encoding call")
    parser.add_argument("--images", type=int, default=256, help="images per encoding call")
    parser.add_argument("--factor", type=int, default=100, help="the funnel's F (k·F rows)")
    parser.add_argument("--server-rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sections", default="encode,flat,funnel,server")
    parser.add_argument("--quick", action="store_true", help="small sizes: a dry run")
    parser.add_argument("--json", type=Path, default=Path("runs/bench/gpu.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.queries, args.texts, args.images = 20_000, 32, 64, 8
        args.server_rows, args.rounds = 2_000, 2
    try:
        check_device(args.device)
    except InputError as error:
        parser.exit(2, f"strata: error: {error}\n")
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - {"encode", "flat", "funnel", "server"})
    if unknown:
        parser.exit(2, f"strata: error: unknown --sections {', '.join(unknown)}\n")
    result: dict[str, Any] = {"benchmark": "gpu", "device": args.device, "quick": args.quick}
    if args.device.startswith("cuda"):
        import torch

        result["gpu"] = torch.cuda.get_device_name(args.device)
    if "encode" in sections:
        result["encode"] = encode_section(args.device, args.texts, args.images, args.rounds)
    if {"flat", "funnel"} & set(sections):
        rotated = spectrum_rows(args.rows, args.dim, alpha=1.0, seed=0)
        queries = spectrum_rows(args.queries, args.dim, alpha=1.0, seed=1)
        if "flat" in sections:
            result["flat"] = flat_section(rotated, queries, args.device, args.rounds)
        if "funnel" in sections:
            result["funnel"] = funnel_section(
                rotated, queries, args.device, args.rounds, args.factor
            )
    if "server" in sections:
        result["server"] = server_section(args.device, args.server_rows, args.rounds)
    return publish(result, args.json)


if __name__ == "__main__":
    main()
