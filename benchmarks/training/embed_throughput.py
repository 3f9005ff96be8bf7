"""Embed-job overhead: the job's throughput as a ratio to a bare encode loop, side by side.

Both arms embed the same texts with the same encoder object in the same process, alternating
(bare, job, bare, job, ...), so machine noise hits both alike. The bare arm hands the encoder
the same windows of texts the job does and does nothing else; the job arm is `embed_corpus`
into a fresh folder (corpus parsing, metadata, float16 cast, checksums, atomic writes, manifest).

    python -m benchmarks.training.embed_throughput --corpus flickr8k --encoder minilm \\
        --limit 8000 --repeats 3        (--path: the data folder's flickr8k/)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.harness import publish, text_throughput_parser
from training.core.encoders import Encoder, load_encoder
from training.core.errors import InputError
from training.corpora import Corpus, Record, open_corpus
from training.embedding.job import EmbedConfig, embed_corpus


class FirstRecords(Corpus):
    """The first `limit` records of another corpus (the benchmark's subset)."""

    def __init__(self, inner: Corpus, limit: int | None) -> None:
        super().__init__(inner.report.on_malformed)
        self.inner, self.limit, self.kind = inner, limit, inner.kind

    def records(self) -> Iterator[Record]:
        for count, record in enumerate(self.inner):
            if self.limit is not None and count >= self.limit:
                return
            yield record

    def describe(self) -> dict:
        return {**self.inner.describe(), "limit": self.limit}


def bare_loop(encoder: Encoder, texts: list[str], window: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(texts), window):
        encoder.encode_text(texts[start : start + window])
    return len(texts) / (time.perf_counter() - started)


def job_run(encoder: Encoder, corpus: Corpus, config: EmbedConfig) -> float:
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as folder:
        started = time.perf_counter()
        summary = embed_corpus(corpus, encoder, Path(folder) / "cache", config)
        return summary.rows_written / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> dict:
    parser = text_throughput_parser(
        __doc__, "minilm", None, 3, Path("runs/bench/embed_throughput.json")
    )
    args = parser.parse_args(argv)

    corpus = FirstRecords(open_corpus(args.corpus, args.path), args.limit)
    texts = [r.text for r in corpus if r.text]
    if not texts:
        raise InputError("the corpus has no texts to embed")
    encoder = load_encoder(args.encoder, device=args.device, batch_size=args.batch_size)
    config = EmbedConfig(progress=False, modalities=("text",))
    encoder.encode_text(texts[:256])  # warm-up, outside both arms

    bare, job = [], []
    for repeat in range(args.repeats):
        bare.append(bare_loop(encoder, texts, config.encode_window))
        job.append(job_run(encoder, corpus, config))
        print(
            f"repeat {repeat}: bare {bare[-1]:.1f} rows/s, job {job[-1]:.1f} rows/s",
            file=sys.stderr,
        )
    result = {
        "benchmark": "embed_throughput",
        "corpus": corpus.describe(),
        "encoder": encoder.id,
        "device": encoder.device,
        "rows": len(texts),
        "repeats": args.repeats,
        "bare_rows_per_s": bare,
        "job_rows_per_s": job,
        "ratio_per_repeat": [j / b for j, b in zip(job, bare, strict=True)],
        "ratio_median": statistics.median(j / b for j, b in zip(job, bare, strict=True)),
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
