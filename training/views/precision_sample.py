"""Print a random sample of Flickr8k captions with their extracted views or their typed hard
negatives, as a Markdown table, and how many captions yield each negative kind.

    python -m training.views.precision_sample data/flickr8k/Flickr8k.token.txt \
        --seed 0 -n 50
    python -m training.views.precision_sample data/flickr8k/Flickr8k.token.txt \
        --negatives --seed 0 -n 17
    python -m training.views.precision_sample data/flickr8k/Flickr8k.token.txt --yields

For judging the extractor's precision by hand; the script makes no judgement itself.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from training.views.extractor import extract_views
from training.views.negatives import NEGATIVE_KINDS, make_negatives


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


def negatives_table(captions: list[str], seed: int, per_kind: int) -> str:
    """A Markdown table of `per_kind` negatives of every kind: the captions are shuffled with
    random.Random(seed) and each kind takes the first `per_kind` captions that yield one; each
    caption's negatives are made with random.Random(seed + its position in the shuffle)."""
    order = list(captions)
    random.Random(seed).shuffle(order)
    rows = ["| # | kind | caption | negative |", "|---|---|---|---|"]
    taken = Counter[str]()
    found: dict[str, list[tuple[str, str]]] = {kind: [] for kind in NEGATIVE_KINDS}
    for position, caption in enumerate(order):
        if all(taken[kind] >= per_kind for kind in NEGATIVE_KINDS):
            break
        views = extract_views(caption)
        negatives = make_negatives(views, random.Random(seed + position))
        for kind, negative in negatives.items():
            if negative is not None and taken[kind] < per_kind:
                taken[kind] += 1
                found[kind].append((views.caption, negative))
    number = 0
    for kind in NEGATIVE_KINDS:
        for caption, negative in found[kind]:
            number += 1
            rows.append(f"| {number} | {kind} | {caption} | {negative} |")
    return "\n".join(rows)


def negative_yields(captions: list[str], seed: int = 0) -> dict[str, int]:
    """How many captions yield a negative of each kind (negatives drawn as
    `training.grasp.data.extracted_view_texts` draws them: one rng seeded `seed` for all)."""
    rng = random.Random(seed)
    counts = Counter[str]()
    for caption in captions:
        negatives = make_negatives(extract_views(caption), rng)
        counts.update(kind for kind, negative in negatives.items() if negative is not None)
    return {kind: counts[kind] for kind in NEGATIVE_KINDS}


def yields_table(captions: list[str]) -> str:
    """A Markdown table of negative_yields over the captions."""
    rows = ["| kind | captions yielding one | share |", "|---|---:|---:|"]
    for kind, count in negative_yields(captions).items():
        rows.append(f"| {kind} | {count} | {count / len(captions):.1%} |")
    rows.append(f"| (all captions) | {len(captions)} | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    """Command line: token-file path, --seed, -n, --negatives, --yields."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="Flickr8k.token.txt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "-n", type=int, default=None, help="captions (default 50), or negatives per kind (17)"
    )
    show = parser.add_mutually_exclusive_group()
    show.add_argument("--negatives", action="store_true", help="sample negatives of each kind")
    show.add_argument("--yields", action="store_true", help="count captions yielding each kind")
    args = parser.parse_args(argv)
    captions = read_captions(args.path)
    if args.yields:
        print(yields_table(captions))
    elif args.negatives:
        print(negatives_table(captions, args.seed, 17 if args.n is None else args.n))
    else:
        print(sample_table(captions, args.seed, 50 if args.n is None else args.n))


if __name__ == "__main__":
    main()
