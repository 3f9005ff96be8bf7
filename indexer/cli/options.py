"""What the `strata index` commands share: their option types, the bundle directory of
`--bundles` (or the old positional form), the publisher of `--redis-url`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from indexer.versions.publish import PREFIX_ENVIRONMENT, RedisPublisher
from training.core.errors import InputError

RedisUrl = Annotated[
    str | None,
    typer.Option(
        "--redis-url",
        help="also record and announce the new version in this Redis (redis://host:6379/0; "
        "default: $STRATA_REDIS_URL)",
        show_default=False,
    ),
]
RedisPrefix = Annotated[
    str,
    typer.Option("--redis-prefix", envvar=PREFIX_ENVIRONMENT, help="prefix of the Redis keys"),
]
Engine = Annotated[
    str, typer.Option(help="where the per-shard work runs: local (this process) | ray")
]
RayAddress = Annotated[
    str | None,
    typer.Option(help="--engine ray: the cluster to join (default: RAY_ADDRESS, else local)"),
]
Keep = Annotated[int, typer.Option(help="versions to keep (the current one always)", min=1)]
Progress = Annotated[bool, typer.Option(help="show progress bars")]
OldBundles = Annotated[
    Path | None, typer.Argument(hidden=True, show_default=False)
]  # the positional form these commands took before --bundles; still accepted


def bundles_of(option: Path | None, positional: Path | None) -> Path:
    """The bundle directory, from --bundles (or the old positional form)."""
    if option is not None and positional is not None and option != positional:
        raise InputError("give the bundle once: --bundles DIR")
    given = option or positional
    if given is None:
        raise InputError("missing option '--bundles' (the bundle directory)")
    return given


def publisher_for(url: str | None, prefix: str) -> RedisPublisher | None:
    """The publisher of `--redis-url`, else of STRATA_REDIS_URL (the settings'); None: none."""
    if url is None:
        from training.core.settings import load_settings

        url = load_settings().redis_url
    return RedisPublisher(url, prefix) if url else None
