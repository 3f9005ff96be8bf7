"""The index stage: an embedding cache + GraSP-VL and CEDAR artifacts → a versioned index bundle.

prefixes.py        the prefix-space math (rotate, renormalised prefixes, exact top-k, recall)
index_plan.py      which FAISS index each prefix gets: the rule table, overrides
sampling.py        the bounded training reservoir
prefix_index.py    writing a prefix index shard by shard, reading it memory-mapped
index_edit.py      a version's prefix indexes extended (add) or filtered (delete), no cache read
codes.py           CEDAR codes of gallery rows, straight into a postings run (the build's coder)
postings.py        CEDAR concept postings (CSR): built from runs, merged onto a base, filtered
ids.py             ids.parquet: ids and metadata in row order
bundle.py          the bundle format, its manifest, and the reader (`Bundle`)
shard_step.py      the pure per-shard step (rotation, CEDAR codes, postings run)
engines.py         where the shard step runs: `--engine local` threads, or `ray`
distributed.py     `--engine ray`: the per-shard work as Ray tasks
version_writer.py  writing one version's files, their records and its manifest (build/add/delete)
versions.py        staging, atomic publish (CURRENT), retention, crash leftovers
release.py         the tail every new version goes through: write, verify, rename, publish, retain
publish.py         publishing: CURRENT, and Redis (key, history, channel, lock)
version_channel.py what replicas follow: `VersionChannel` (current, history, subscribe, listen)
build_inputs.py    `strata index build`'s config and its checked inputs
build.py           `strata index build`: one pass over the cache (shards on an engine)
row_changes.py     what an add or a delete may change: its refusals, the rows it keeps
update.py          `strata index add | delete`: new versions without a rebuild
faults.py          what verification reports: faults, the report, the refusal
verify_sample.py   the sample of rows recomputed from the source cache
verify.py          `strata index verify`, and `check_servable`
crashpoints.py     named stages where tests kill a build, an add or a delete
cli.py             the `strata index` command group
upgrade_cli.py     `strata upgrade`: a query translator for a bundle (training/cosae's fit)
"""
