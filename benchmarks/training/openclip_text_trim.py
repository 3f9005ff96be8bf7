"""open_clip text tower: trimmed padding (`encode_text_trimmed`) against open_clip's own
`encode_text`, side by side on the same texts, batches and model, alternating per repeat.

    python -m benchmarks.training.openclip_text_trim --encoder open_clip:ViT-B-32 --limit 1024
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.harness import publish, text_throughput_parser
from training.core.encoders import load_encoder
from training.core.encoders.openclip import OpenClipEncoder, encode_text_trimmed
from training.corpora import open_corpus


def rows_per_second(encode, batches: list[torch.Tensor]) -> tuple[float, torch.Tensor]:
    started = time.perf_counter()
    with torch.inference_mode():
        out = torch.cat([encode(tokens) for tokens in batches])
    return sum(len(b) for b in batches) / (time.perf_counter() - started), out


def main(argv: list[str] | None = None) -> dict:
    parser = text_throughput_parser(
        __doc__, "open_clip:ViT-B-32", 1024, 2, Path("runs/bench/openclip_text_trim.json")
    )
    args = parser.parse_args(argv)

    encoder = load_encoder(args.encoder, device=args.device, batch_size=args.batch_size)
    if not isinstance(encoder, OpenClipEncoder):
        parser.error("--encoder must be an open_clip spec")
    texts = [
        r.text for _, r in zip(range(args.limit), open_corpus(args.corpus, args.path), strict=False)
    ]
    texts.sort(key=len)  # both arms get the length-sorted batches the encoder itself makes
    batches = [
        encoder.tokenizer(texts[i : i + args.batch_size]).to(encoder.device)
        for i in range(0, len(texts), args.batch_size)
    ]
    full, trimmed, difference = [], [], 0.0
    for repeat in range(args.repeats):
        speed, reference = rows_per_second(encoder.model.encode_text, batches)
        full.append(speed)
        speed, ours = rows_per_second(lambda t: encode_text_trimmed(encoder.model, t), batches)
        trimmed.append(speed)
        difference = max(difference, float((reference.float() - ours.float()).abs().max()))
        print(
            f"repeat {repeat}: full {full[-1]:.1f} rows/s, trimmed {trimmed[-1]:.1f} rows/s",
            file=sys.stderr,
        )
    result = {
        "benchmark": "openclip_text_trim",
        "encoder": encoder.id,
        "device": encoder.device,
        "rows": len(texts),
        "batch_size": args.batch_size,
        "full_rows_per_s": full,
        "trimmed_rows_per_s": trimmed,
        "speedup_median": statistics.median(t / f for t, f in zip(trimmed, full, strict=True)),
        "max_abs_difference": difference,
    }
    return publish(result, args.json)


if __name__ == "__main__":
    main()
