"""The index stage: an embedding cache + GraSP-VL and CEDAR artifacts → a versioned index bundle.

prefixes.py      the prefix-space math (rotate, renormalised prefixes, exact top-k, recall)
index_plan.py    which FAISS index each prefix gets: the rule table, overrides
sampling.py      the bounded training reservoir
prefix_index.py  writing a prefix index shard by shard, reading it memory-mapped
index_edit.py    a version's prefix indexes extended (add) or filtered (delete), no cache read
codes.py         CEDAR codes of gallery rows, straight into a postings run (the build's coder)
postings.py      CEDAR concept postings (CSR): built from runs, merged onto a base, filtered
ids.py           ids.parquet: ids and metadata in row order
bundle.py        the bundle format, its manifest, and the reader (`Bundle`)
versions.py      staging, atomic publish (CURRENT), retention, crash leftovers
release.py       the tail every new version goes through: write, verify, rename, publish, retain
publish.py       publishing: CURRENT, and Redis (key, history, channel, lock); `VersionChannel`
build.py         `strata index build`: one pass over the cache (shards on an engine)
distributed.py   `--engine ray`: the per-shard work as Ray tasks
update.py        `strata index add | delete`: new versions without a rebuild
verify.py        `strata index verify`
crashpoints.py   named stages where tests kill a build, an add or a delete
durable.py       sha256 (read back, or on the way as a file is written), fsync of files and dirs
cli.py           the `strata index` command group
"""
