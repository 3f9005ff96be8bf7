"""Which FAISS index each prefix gets: a declarative rule table, and user overrides.

Every index is built by `faiss.index_factory(L, factory, METRIC_INNER_PRODUCT)` from a factory
string. The rule for a prefix of length L over n rows is the first row of `RULES` whose
conditions hold (n in [min_rows, max_rows], and — where `fits_budget` — the estimated RAM
n·(bytes_per_dim·L + bytes_per_row) at most the memory budget, which is per prefix index):

| kind         | factory                    | rows          | RAM per row (bytes)       |
|--------------|----------------------------|---------------|---------------------------|
| flat         | Flat                       | n ≤ 200,000   | 4·L                       |
| hnsw         | HNSW32,Flat                | n ≤ 2,000,000 | 4·L + 272 (graph links)   |
| ivfpq-refine | IVF{nlist},PQ{m}x8np,RFlat | n ≥ 10,000    | 4.25·L + 8 (exact rerank) |
| ivfpq-ondisk | IVF{nlist},PQ{m}x8np       | n ≥ 10,000    | no budget test: the lists |
|              |   (inverted lists on disk) |               | (L/4 + 8) are on disk     |
| flat         | Flat (fallback)            | any           | no budget test (n < 10k)  |

Flat is exact and, written as a stream and memory-mapped, costs no RAM to build; the budget
stands for what the index takes when a service holds it resident. HNSW is built in RAM. IVF-PQ
keeps one byte per 4 coordinates plus an 8-byte id per row; RFlat adds the float32 vectors for an
exact rerank of k_factor·k candidates. `np`: no polysemous training (it is slow, and only serves
Hamming-distance filtering, which the bundle does not use).

nlist = 4·√n rounded to a power of two, within [16, 65,536] and at most n/39 (FAISS wants ≥ 39
training rows per list); from HNSW_QUANTIZER_LISTS lists (about 2M rows) up the coarse quantizer
is an HNSW graph over the centroids (`IVF{nlist}_HNSW32`, searched with efSearch =
QUANTIZER_EF), since a flat one scores every centroid on every search: at 10M rows (16,384
lists) that was 0.086 of an object query's 0.216 ms, and the graph finds 0.999 of the same lists
in 0.037 (benchmarks/indexer/coarse_quantizer.py); m = the largest divisor of L that is ≤ L/4
(one byte per 4 coordinates, 16× smaller than float32). An override (`--index-type 24=HNSW32`, or
`object=hnsw`) names either a rule kind of the table or any factory string FAISS accepts
(`{nlist}` and `{m}` are filled in); an override factory is built in RAM. An IVF or PQ
index is trained on a reservoir sample (indexer/build/sampling.py) of 39 rows per list or PQ
centroid, at most 200,000 rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import faiss

from training.core.errors import InputError
from training.core.granularity import Contract, Granularity

TRAINING_ROWS_PER_LIST = 39
PQ_CENTROIDS = 256
TRAIN_ROWS_MAX = 200_000
HNSW_QUANTIZER_LISTS = 8192  # from this many IVF lists up, the coarse quantizer is a graph
QUANTIZER_EF = 32  # that graph's efSearch (FAISS searches max(efSearch, nprobe) wide)


class IndexTypeError(InputError):
    """An --index-type or --memory-budget the indexer cannot use."""


@dataclass(frozen=True)
class IndexRule:
    """One row of the table: when it applies, and the factory template it builds."""

    kind: str
    factory: str
    min_rows: int = 0
    max_rows: int | None = None
    bytes_per_dim: float = 4.0
    bytes_per_row: float = 0.0
    fits_budget: bool = True
    ondisk: bool = False
    rerank: bool = False  # compressed codes reranked from the shared store (store_rerank.py)

    def ram_bytes(self, rows: int, length: int) -> int:
        """Estimated RAM of the index while built or served resident: n·(a·L + b)."""
        return math.ceil(rows * (self.bytes_per_dim * length + self.bytes_per_row))

    def applies(self, rows: int, length: int, budget: int) -> bool:
        if rows < self.min_rows or (self.max_rows is not None and rows > self.max_rows):
            return False
        return not self.fits_budget or self.ram_bytes(rows, length) <= budget


RULES: tuple[IndexRule, ...] = (
    IndexRule("flat", "Flat", max_rows=200_000),
    IndexRule("hnsw", "HNSW32,Flat", max_rows=2_000_000, bytes_per_row=272),
    IndexRule(
        "ivfpq-refine",
        "IVF{nlist},PQ{m}x8np,RFlat",
        min_rows=10_000,
        bytes_per_dim=4.25,
        bytes_per_row=8,
    ),
    IndexRule(
        "ivfpq-ondisk",
        "IVF{nlist},PQ{m}x8np",
        min_rows=10_000,
        bytes_per_dim=0.25,
        bytes_per_row=8,
        fits_budget=False,
        ondisk=True,
    ),
    IndexRule("flat", "Flat", fits_budget=False),
)


# a prefix the shared store serves: Flat, no file of its own (PrefixPlan.store)
STORE_RULE = IndexRule("flat", "Flat", fits_budget=False)
STORE_REASON = "served from the shared store"
# the shortest prefix of a gallery past SMALL_GALLERY rows, with a store: compressed codes (one
# byte a coordinate, in IVF lists) whose candidates are reranked from the store, chosen by
# measurement (docs/explanation/store.md#shortlist-codes): at 1M × 512 recall@10 ≥ 0.95 at every
# granularity for 40 B a row, where HNSW32 over float32 costs 400
SHORTLIST_RULE = IndexRule(
    "ivf-sq8-rerank",
    "IVF{nlist},SQ8",
    bytes_per_dim=1,
    bytes_per_row=8,
    fits_budget=False,
    rerank=True,
)
# up to this many rows, every prefix of a bundle with a store is an exact scan of its heads (the
# funnel's own floor, FunnelConfig.min_rows: past it the longer prefixes funnel from the codes);
# on the Flickr8k demo's 40,460 rows the codes answer an object query ~10x faster than the scan
# at recall@10 0.95 (`python -m benchmarks.service.layout.memory --cache …`)
SMALL_GALLERY = 20_000


@dataclass(frozen=True)
class PrefixPlan:
    """The index one prefix gets: its concrete factory string and why it was chosen."""

    length: int
    granularity: Granularity
    kind: str  # the rule's kind, or "override"
    factory: str
    ondisk: bool
    reason: str
    rerank: bool = False  # codes reranked from the shared store
    store: bool = False  # served from the shared store: Flat in RAM, no file of its own

    @property
    def file(self) -> str:
        return f"prefix_{self.length}.faiss"

    @property
    def needs_training(self) -> bool:
        return not new_index(self.factory, self.length).is_trained

    def training_rows(self, rows: int) -> int:
        """Rows of the training sample: 39 per IVF list and per PQ centroid, bounded."""
        index = new_index(self.factory, self.length)
        if index.is_trained:
            return 0
        ivf = faiss.try_extract_index_ivf(index)
        wanted = TRAINING_ROWS_PER_LIST * max(ivf.nlist if ivf is not None else 1, PQ_CENTROIDS)
        return min(rows, wanted, TRAIN_ROWS_MAX)


def ivf_lists(rows: int) -> int:
    """nlist = 4·√n as a power of two, within [16, 65536] and ≤ n / 39 (at least 1)."""
    target = 2 ** round(math.log2(max(4 * math.sqrt(max(rows, 1)), 1)))
    return max(1, min(max(target, 16), 65_536, rows // TRAINING_ROWS_PER_LIST))


def coarse_quantizer(rows: int) -> str:
    """The IVF part of a factory over n rows: IVF{nlist}, with an HNSW graph over the
    centroids from HNSW_QUANTIZER_LISTS lists up (module docstring)."""
    lists = ivf_lists(rows)
    return f"IVF{lists}_HNSW32" if lists >= HNSW_QUANTIZER_LISTS else f"IVF{lists}"


def pq_subquantizers(length: int) -> int:
    """m = the largest divisor of L that is ≤ L/4 (at least 1)."""
    return max(d for d in range(1, max(length // 4, 1) + 1) if length % d == 0)


def fill_factory(template: str, rows: int, length: int) -> str:
    coarse = template.replace("IVF{nlist}", coarse_quantizer(rows))  # the IVF part, if any
    return coarse.replace("{nlist}", str(ivf_lists(rows))).replace(
        "{m}", str(pq_subquantizers(length))
    )


def new_index(factory: str, length: int) -> faiss.Index:
    """An empty inner-product index from a factory string; IndexTypeError if FAISS refuses."""
    try:
        return faiss.index_factory(length, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unknown"
        raise IndexTypeError(
            f"FAISS cannot build {factory!r} for prefix length {length}: {reason}"
        ) from None


def plan_indexes(
    rows: int,
    contract: Contract,
    budget: int,
    overrides: Mapping[int, str] | None = None,
    rules: Sequence[IndexRule] = RULES,
    store: bool = False,
) -> list[PrefixPlan]:
    """One plan per prefix of the contract: the override if given, else the first rule that
    applies (the table's last row must apply always). With a shared store (`store`), a prefix
    no override names is Flat, which the store serves (no file of its own:
    PrefixPlan.store) whatever the row count, except the shortest past
    SMALL_GALLERY rows: compressed shortlist codes reranked from the store (SHORTLIST_RULE),
    which the funnels of the longer prefixes shortlist from."""
    overrides = dict(overrides or {})
    by_kind = {rule.kind: rule for rule in reversed((*rules, SHORTLIST_RULE))}
    shortest = min(contract.values())
    plans = []
    for granularity, length in contract.items():
        wanted = overrides.get(length)
        if wanted is None and store and (length != shortest or rows <= SMALL_GALLERY):
            rule, reason = STORE_RULE, STORE_REASON
        elif wanted is None and store:
            rule, reason = SHORTLIST_RULE, f"shortlist codes reranked from the store ({rows} rows)"
        elif wanted is not None and wanted in by_kind:
            rule, reason = by_kind[wanted], f"--index-type {length}={wanted}"
        elif wanted is not None:
            rule = IndexRule("override", wanted, fits_budget=False)  # any factory FAISS accepts
            reason = f"--index-type {length}={wanted}"
        else:
            rule = next((r for r in rules if r.applies(rows, length, budget)), None)
            if rule is None:
                raise IndexTypeError(f"no index rule applies to {rows} rows at prefix {length}")
            reason = rule_reason(rule, rows, length, budget)
        if rule.rerank and not store:
            raise IndexTypeError(
                f"--index-type {length}={rule.kind} reranks from the shared store: build with "
                "--store int8 or float16"
            )
        factory = fill_factory(rule.factory, rows, length)
        served = store and factory == "Flat" and not rule.ondisk  # an override's Flat too
        if served and reason != STORE_REASON:
            reason += "; served from the shared store"
        plan = PrefixPlan(
            length, granularity, rule.kind, factory, rule.ondisk, reason, rule.rerank, served
        )
        new_index(plan.factory, length)  # refuse what FAISS cannot build before any work
        plans.append(plan)
    return plans


def rule_reason(rule: IndexRule, rows: int, length: int, budget: int) -> str:
    limits = [f"{rows} rows"]
    if rule.fits_budget:
        limits.append(f"~{format_bytes(rule.ram_bytes(rows, length))} ≤ {format_bytes(budget)}")
    return f"rule {rule.kind}: " + ", ".join(limits)


def parse_index_types(values: Sequence[str], contract: Contract) -> dict[int, str]:
    """`PREFIX=FACTORY` items (PREFIX a prefix length or a granularity name) → {length: value}."""
    lengths = {str(n): n for n in contract.values()}
    lengths.update({g.value: n for g, n in contract.items()})
    parsed: dict[int, str] = {}
    for value in values:
        prefix, sep, factory = value.partition("=")
        prefix, factory = prefix.strip(), factory.strip()
        if not sep or not prefix or not factory:
            raise IndexTypeError(f"bad --index-type {value!r}: expected PREFIX=FACTORY")
        if prefix.lower() not in lengths:
            known = ", ".join(f"{g.value}={n}" for g, n in contract.items())
            raise IndexTypeError(
                f"bad --index-type {value!r}: {prefix!r} is not a prefix of the contract ({known})"
            )
        length = lengths[prefix.lower()]
        if length in parsed:
            raise IndexTypeError(f"--index-type names prefix {length} twice")
        parsed[length] = factory
    return parsed


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """'4GiB' → 4·2³⁰, '500MB' → 5·10⁸, '1024' → 1024 bytes."""
    match = _SIZE.match(text)
    if not match:
        raise IndexTypeError(f"bad size {text!r}: expected e.g. 4GiB, 512MiB, 2GB or a byte count")
    unit = (match.group(2) or "").lower()
    letter = unit[:1] if unit[:1] != "b" else ""
    scale = 1024 ** " kmgt".index(letter) if "i" in unit else _UNITS[letter]
    size = int(float(match.group(1)) * scale)
    if size <= 0:
        raise IndexTypeError(f"bad size {text!r}: must be positive")
    return size


def format_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
