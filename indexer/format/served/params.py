"""One search's parameters, typed: what every served index takes per call
(indexer/format/served_index.py), as FAISS's own `SearchParameters` are per index type.

A bundle's manifest keeps a prefix's parameters as a FAISS ParameterSpace string
('nprobe=32,efSearch=128,k_factor_rf=4', the format's own record); a search takes them parsed
once into `SearchParams`, whose unset fields leave the index's own values in force."""

from __future__ import annotations

from dataclasses import dataclass, replace

K_FACTOR = "k_factor_rf"  # FAISS's name for a refine's factor, a store rerank's too


def parse_search_parameters(parameters: str) -> dict[str, float]:
    """'nprobe=32,k_factor_rf=4' → {'nprobe': 32.0, 'k_factor_rf': 4.0}."""
    parsed = {}
    for item in filter(None, (p.strip() for p in parameters.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"bad search parameter {item!r}: expected NAME=VALUE")
        parsed[name.strip()] = float(value)
    return parsed


@dataclass(frozen=True)
class SearchParams:
    """Per-call search parameters; None leaves the index's own value. `nprobe`: an IVF's lists
    probed; `ef_search`: an HNSW graph's breadth; `k_factor`: the candidates a refine (FAISS's
    RFlat) or a store rerank fetches, as a multiple of k."""

    nprobe: int | None = None
    ef_search: int | None = None
    k_factor: float | None = None

    @classmethod
    def parse(cls, setting: str) -> SearchParams:
        """A ParameterSpace string's efSearch, nprobe and k_factor_rf (other names are FAISS's
        own and not per-call parameters here: ignored, as a per-call search always did)."""
        given = parse_search_parameters(setting)
        return cls(
            nprobe=int(given["nprobe"]) if "nprobe" in given else None,
            ef_search=int(given["efSearch"]) if "efSearch" in given else None,
            k_factor=given.get(K_FACTOR),
        )

    def given(self, **values: float | None) -> SearchParams:
        """These parameters with `values` set where they are not None."""
        return replace(self, **{name: v for name, v in values.items() if v is not None})

    def without_k_factor(self) -> SearchParams:
        return replace(self, k_factor=None)


NO_PARAMS = SearchParams()
