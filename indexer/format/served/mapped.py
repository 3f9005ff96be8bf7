"""A prefix's own FAISS index (memory-mapped) as a served index (indexer/format/served_index.py):
its kind — graph, inverted lists, refine, the exact rows it keeps — read once by the factory
(`served_index.mapped`), its calls answered from them."""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from indexer.format.row_bitmaps import AllowedRows
from indexer.format.served.allowed import (
    EXACT_FALLBACK_MAX,
    EXACT_ROWS_PER_EF,
    FILTERED_EF_MAX,
    POST_FILTER_FETCH,
    POST_FILTER_SHARE,
    exact_top,
    filtered_ef,
    filtered_nprobe,
    pad,
)
from indexer.format.served.flat import FlatStorage
from indexer.format.served.params import K_FACTOR, NO_PARAMS, SearchParams

EF_LADDER = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
K_FACTORS = (1, 2, 4, 8, 16)


@dataclass(eq=False)
class MappedIndex:
    """A FAISS index (downcast) and what the factory read of its kind: `graph` (an HNSW over
    the rows), `ivf` (its inverted lists, a refine's base's included) and `coarse` (their
    quantizer), `refine` with `base` (the refine's base index), `exact` (the flat rows it
    keeps, if any), `approximate` (all but a Flat index)."""

    faiss: faiss.Index
    graph: faiss.IndexHNSW | None = None
    ivf: faiss.IndexIVF | None = None
    refine: faiss.IndexRefine | None = None
    base: MappedIndex | None = None
    coarse: MappedIndex | None = None  # an IVF's coarse quantizer, served
    exact: FlatStorage | None = None
    approximate: bool = True  # all but a Flat index
    flat_codes: bool = False  # rows kept as flat codes (removable in place)
    owner: object = None  # the Python object owning the C++ index (downcasts do not own it)
    store = None  # it reads no shared store

    @property
    def ntotal(self) -> int:
        return int(self.faiss.ntotal)

    @property
    def d(self) -> int:
        return int(self.faiss.d)

    @property
    def metric_type(self) -> int:
        return int(self.faiss.metric_type)

    @property
    def shortlist(self) -> MappedIndex:
        return self

    @property
    def kind_name(self) -> str:
        return type(self.faiss).__name__

    def search(
        self,
        x: np.ndarray,
        k: int,
        params: SearchParams | None = None,
        allowed: AllowedRows | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores [Q, k], rows [Q, k]) of unit queries [Q, d], FAISS's padding; `params` for
        this call only (the index keeps its own); `allowed`: one query [1, d] inside these rows
        (indexer.format.served.allowed.py)."""
        if allowed is not None:
            return mapped_allowed(self, x, k, allowed, params or NO_PARAMS)
        if params is None:
            return self.faiss.search(x, k)
        return self.faiss.search(x, k, params=self.faiss_params(params))

    def faiss_params(
        self, params: SearchParams, selector: faiss.IDSelector | None = None
    ) -> faiss.SearchParameters:
        """One search's parameters as FAISS's object of the index's type: `params`' efSearch,
        nprobe and k_factor where set, else the index's current values; `selector` restricts
        the rows (a refine passes it to its base, whose candidates it refines)."""
        if self.refine is not None and self.base is not None:
            base = self.base.faiss_params(params, selector)
            out = faiss.IndexRefineSearchParameters()
            k_factor = self.refine.k_factor if params.k_factor is None else params.k_factor
            out.k_factor = float(k_factor)
            out.base_index_params = base
            out.referenced = base  # keeps the base's parameters alive as long as these
            return out
        if self.graph is not None:
            out = faiss.SearchParametersHNSW()
            out.efSearch = int(
                self.graph.hnsw.efSearch if params.ef_search is None else params.ef_search
            )
        elif self.ivf is not None:
            out = faiss.SearchParametersIVF()
            out.nprobe = int(self.ivf.nprobe if params.nprobe is None else params.nprobe)
            out.max_codes = self.ivf.max_codes
        else:
            out = faiss.SearchParameters()
        if selector is not None:
            out.sel = selector
            out.referenced = selector  # a Python reference: the selector outlives the search
        return out

    def apply(self, setting: str) -> None:
        """Set the index's own search parameters (a ParameterSpace string), what every search
        without `params` uses."""
        if setting:
            faiss.ParameterSpace().set_index_parameters(self.faiss, setting)

    def ladders(self) -> list[list[str]]:
        """The settings a tuning tries, as ladders of rising cost (indexer/format/tuning.py)."""
        if self.graph is not None:
            return [[f"efSearch={ef}" for ef in EF_LADDER]]
        if self.ivf is None:
            return []
        probes = [2**i for i in range(int(np.log2(self.ivf.nlist)) + 1)]
        if probes[-1] != self.ivf.nlist:
            probes.append(self.ivf.nlist)
        if self.refine is not None:
            return [[f"nprobe={p},{K_FACTOR}={f}" for p in probes] for f in K_FACTORS]
        return [[f"nprobe={p}" for p in probes]]

    def widest(self) -> SearchParams:
        """Parameters that probe every list (an IVF's nprobe = nlist)."""
        return NO_PARAMS if self.ivf is None else SearchParams(nprobe=int(self.ivf.nlist))

    def wider_probes(self) -> list[str]:
        """The shortlist settings a funnel calibration tries: the index's own, and for an IVF
        its nprobe widened 2, 4, 8 and 16 times (at most every list): a neighbour at L can lie
        in a list the object search at S never probes."""
        if self.ivf is None:
            return [""]
        ivf = self.ivf
        wider = sorted({min(ivf.nlist, ivf.nprobe * m) for m in (2, 4, 8, 16)} - {ivf.nprobe})
        return ["", *(f"nprobe={p}" for p in wider)]

    def scanned_floats(self, length: int, total: int, params: SearchParams) -> float:
        """Floats one search at prefix `length` scans: for an IVF the probed share of the rows
        and the coarse quantizer's, (nprobe/nlist)·N·S + the quantizer's own (nprobe the
        params', else the index's); for an HNSW graph about efSearch·2M rows of S floats; for
        a flat index (a flat quantizer: its nlist centroids) every row."""
        if self.ivf is not None:
            ivf = self.ivf
            nprobe = ivf.nprobe if params.nprobe is None else params.nprobe
            assert self.coarse is not None
            return (nprobe / ivf.nlist) * total * length + self.coarse.scanned_floats(
                length, ivf.nlist, NO_PARAMS
            )
        if self.graph is not None:
            visited = self.graph.hnsw.efSearch * 2 * self.graph.hnsw.nb_neighbors(1)
            return float(min(total, visited) * length)
        return float(total * length)

    def reconstruct(self, row: int) -> np.ndarray:
        return self.faiss.reconstruct(row)

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.faiss.reconstruct_n(start, n)

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return self.faiss.reconstruct_batch(rows)


def mapped_allowed(
    index: MappedIndex, query: np.ndarray, k: int, allowed: AllowedRows, params: SearchParams
) -> tuple[np.ndarray, np.ndarray]:
    """A FAISS index's search of one query [1, L] inside the allowed rows (module docstring)."""
    exact = index.exact
    wanted = min(k, allowed.count)
    share = allowed.count / allowed.total
    graph = index.graph
    if graph is not None and params.ef_search is None:
        if share >= POST_FILTER_SHARE:
            found = post_filtered(
                index, graph.hnsw.efSearch, query, k, wanted, allowed, share, params
            )
            if found is not None:
                return found
        ef = filtered_ef(graph.hnsw.efSearch, wanted, share)
        if exact is not None and allowed.count <= min(EXACT_ROWS_PER_EF * ef, EXACT_FALLBACK_MAX):
            return pad(*exact_top(exact, query, allowed.materialise(), k), k)
        params = params.given(ef_search=min(ef, FILTERED_EF_MAX))
    ivf = index.ivf
    if ivf is not None and params.nprobe is None:
        params = params.given(nprobe=filtered_nprobe(ivf.nprobe, ivf.nlist, share))
    scores, rows = index.faiss.search(
        query, k, params=index.faiss_params(params, allowed.selector())
    )
    if (
        exact is not None
        and int((rows[0] >= 0).sum()) < wanted
        and allowed.count <= EXACT_FALLBACK_MAX
    ):
        return pad(*exact_top(exact, query, allowed.materialise(), k), k)
    return scores, rows


def post_filtered(
    index: MappedIndex,
    ef: int,
    query: np.ndarray,
    k: int,
    wanted: int,
    allowed: AllowedRows,
    share: float,
    params: SearchParams,
) -> tuple[np.ndarray, np.ndarray] | None:
    """A filter allowing a large share of the rows, on an HNSW index: the unfiltered search for
    POST_FILTER_FETCH times the hits the share predicts among the top k, its allowed hits
    kept in order; None when fewer than `wanted` of them are allowed (the allowed rows lie
    away from the query), for the filtered traversal to answer instead. `share`: the allowed
    rows' share of all."""
    fetch = min(allowed.total, int(np.ceil(POST_FILTER_FETCH * k / share)))
    scores, rows = index.search(query, fetch, params.given(ef_search=max(ef, fetch)))
    keep = rows[0] >= 0
    keep[keep] = allowed.contains(rows[0][keep])
    if int(keep.sum()) < wanted:
        return None
    return pad(scores[:, keep][:, :k], rows[:, keep][:, :k], k)
