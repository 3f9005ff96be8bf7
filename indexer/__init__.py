"""The index stage: an embedding cache + GraSP-VL and CEDAR artifacts → a versioned index bundle.

prefixes.py      the prefix-space math (rotate, renormalised prefixes, exact top-k, recall)
index_plan.py    which FAISS index each prefix gets: the rule table, overrides
sampling.py      the bounded training reservoir
prefix_index.py  writing a prefix index shard by shard, reading it memory-mapped
postings.py      CEDAR concept postings (CSR)
ids.py           ids.parquet: ids and metadata in row order
bundle.py        the bundle format, its manifest, and the reader (`Bundle`)
versions.py      staging, atomic publish (CURRENT), retention, crash leftovers
build.py         `strata index build`: one pass over the cache
verify.py        `strata index verify`
crashpoints.py   named stages where tests kill a build
durable.py       sha256 and fsync of files and directories
cli.py           the `strata index` command group
"""
