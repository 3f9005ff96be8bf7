"""The micro-batcher's settings (service/serving/batching.py): batch size, the wait for company, the
queue's bound and the time a chunk of a multi-item request aims at."""

from __future__ import annotations

from pydantic import ConfigDict, ValidationInfo, field_validator

from training.core.config import ConfigModel


class BatchingConfig(ConfigModel):
    """`max_batch` items per call, `max_wait_ms` at most of waiting for company, `max_queue`
    requests waiting at most, `chunk_ms` the time a chunk of a multi-item request aims at,
    `lanes` batches processed at once (each request in one lane at most), `inline_ms` the
    cost below which a lone cheap query runs on the event loop;
    `enabled=False` processes every item alone."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = True
    max_batch: int = 32
    max_wait_ms: float = 0.0
    max_queue: int = 64
    chunk_ms: float = 20.0
    # two: a small query runs beside the heaviest request instead of after it (on two CPU cores
    # its p99 beside back-to-back Explains went from 9.4x to 1.7x idle, beside the largest
    # BatchSearch of Explains from 6.2x to 2.7x: python -m benchmarks.service.robustness.heavy
    # --rows 20000 --small 100 --threads 1)
    lanes: int = 2
    # a lone query the server marks cheap (no encoder call: a raw vector, a cached text) that
    # finds nothing queued runs on the event loop itself, without the two thread hand-offs of
    # a lane, while lone queries of its kind (service/api/server.py) have cost at most this (a
    # moving average; the first of a kind runs in a lane); 0: never. On two
    # cores the hand-offs were 0.2-0.3 ms of a served object query's 1.5-2 ms, and a cached
    # AUTO text (0.9 ms in-process) sat at 1 ms: at 2, served − in-process fell from
    # 0.874-0.896 to 0.792-0.806 ms for it, object unchanged (0.78-0.80 ms), runs alternated
    # (benchmarks.service.request_path)
    inline_ms: float = 2.0

    @field_validator("max_batch", "max_queue", "lanes")
    @classmethod
    def _at_least_one(cls, value: int, info: ValidationInfo) -> int:
        if value < 1:
            what = str(info.field_name).replace("_", " ")  # "max batch", "max queue"
            raise ValueError(f"{what} must be at least 1, got {value}")
        return value

    @field_validator("max_wait_ms")
    @classmethod
    def _max_wait(cls, value: float) -> float:
        if not 0 <= value <= 10_000:
            raise ValueError(f"max wait must lie in [0, 10000] ms, got {value}")
        return value

    @field_validator("inline_ms")
    @classmethod
    def _inline(cls, value: float) -> float:
        if not 0 <= value <= 1_000:
            raise ValueError(f"inline time must lie in [0, 1000] ms, got {value}")
        return value

    @field_validator("chunk_ms")
    @classmethod
    def _chunk(cls, value: float) -> float:
        if not 0 < value <= 10_000:
            raise ValueError(f"chunk time must lie in (0, 10000] ms, got {value}")
        return value
