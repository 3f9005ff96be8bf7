"""The index stage: an embedding cache + GraSP-VL and CEDAR artifacts → a versioned index bundle.

Subpackages, each importing only those above it in this list (tests/test_layering.py):

format/      the bundle's files: prefixes (the prefix-space math), index_plan (which FAISS index
             each prefix gets), prefix_index (writing and reading a prefix index), tuning
             (search parameters tuned to a recall target), store (the shared vector store),
             postings (CEDAR concept postings, CSR), codes (CEDAR codes into a postings run),
             ids (ids.parquet), bundle (the format, its manifest, the reader `Bundle`),
             footprint (bytes per row)
verify/      faults (what a check reports), store and sample (the store's and the sampled rows'
             checks), check (`strata index verify`, `check_servable`)
versions/    bundle_store (staging, CURRENT, retention, crash leftovers), publish (CURRENT and
             Redis), release (write, verify, rename, publish, retain), channel (what replicas
             follow), crashpoints (named stages where tests kill a job)
build/       inputs (`strata index build`'s config and checked inputs), sampling (the training
             reservoir), shard_step (the pure per-shard step), engines and distributed (local
             threads or Ray), version_writer (one version's files: build, add, delete), full
             (the build: one pass over the cache)
update/      row_changes (what an add or a delete may change), index_edit (prefix indexes
             extended or filtered), rows (`strata index add | delete`)
milvus/      store (a version as a Milvus collection, the export)
cli/         index (the `strata index` group), export (`strata index export`), upgrade
             (`strata upgrade`)

Its benchmarks are not part of the package: `python -m benchmarks.indexer.X` from the
repository's root (benchmarks/indexer/).
"""
