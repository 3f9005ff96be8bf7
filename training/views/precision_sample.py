"""Print a random sample of Flickr8k captions with their extracted views, as a Markdown table.

    python -m training.views.precision_sample ../shared/data/flickr8k/Flickr8k.token.txt \
        --seed 0 -n 50

For judging the extractor's precision by hand; the script makes no judgement itself.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from training.views.extractor import extract_views


def read_captions(path: Path) -> list[str]:
    """The captions of a Flickr8k token file (lines "<image>.jpg#<n>\\t<caption>"), in order."""
    captions = []
    for line in path.read_text(encoding="utf-8").splitlines():
        _, tab, caption = line.partition("\t")
        if tab and caption.strip():
            captions.append(caption)
    return captions


def sample_table(captions: list[str], seed: int, n: int) -> str:
    """A Markdown table of n captions drawn with random.Random(seed) and their views."""
    rows = ["| # | caption | object | attribute | relation |", "|---|---|---|---|---|"]
    for number, caption in enumerate(random.Random(seed).sample(captions, n), start=1):
        views = extract_views(caption)
        cells = [views.caption, views.object, views.attribute, views.relation]
        rows.append(f"| {number} | " + " | ".join("—" if c is None else c for c in cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    """Command line: token-file path, --seed, -n."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="Flickr8k.token.txt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-n", type=int, default=50, help="how many captions (default 50)")
    args = parser.parse_args(argv)
    print(sample_table(read_captions(args.path), args.seed, args.n))


if __name__ == "__main__":
    main()
