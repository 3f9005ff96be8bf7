"""What every stage shares, and nothing else of Strata is imported here.

`training/ → indexer/ → service/` is the data flow; each stage reads the previous stage's files
through the module below that owns the format. This package sits under all three:

    errors       InputError / CacheError: the bad input a user can cause, one line each
    files        durable files: atomic writes, fsync, sha256
    granularity  the granularity levels and the prefix-length contract
    rotations    orthogonal maps and their checks
    metrics      retrieval metrics and the prefix normalisation p_L, one implementation each
    artifacts    the transform artifact (a rotation + its contract): training's output format
    cache        the embedding cache: the embedding job's output format
    encoders     the one encoder interface, its factory and the MiniLM / open_clip families
    settings     StrataSettings, the process-wide settings read from the environment
    config       ConfigModel and load_config: the one config style and its one loader
"""
