"""Named points where a test can kill a build, to prove what a crash there leaves behind.

`STRATA_INDEX_CRASH_AT=<stage>` makes the job SIGKILL itself when it reaches that stage (no
cleanup, no atexit, no flush — as if the machine lost power for this process). Unset, a crash
point costs one environment lookup. `strata index add` passes the same stages as a build
(after-first-shard: the first shard of the added cache); `strata index delete` all but
after-first-shard (it reads no shards). The last three are in indexer/versions/release.py, shared.
"""

from __future__ import annotations

import os
import signal

from training.core.errors import InputError

ENVIRONMENT = "STRATA_INDEX_CRASH_AT"
STAGES = (
    "after-first-shard",  # rows of one shard are in the staging folder's writers (build, add)
    "after-prefix-index",  # every prefix_{L}.faiss is written
    "after-postings",  # the postings .npy files are written
    "before-rename",  # the staging folder is complete, fsynced and verified
    "before-pointer-switch",  # the version folder has its final name; CURRENT not yet moved
    "after-pointer-switch",  # CURRENT names the new version; retention has not run
)


def check_crash_setting() -> None:
    """Refuse an unknown stage up front (a typo would otherwise silently never crash)."""
    stage = os.environ.get(ENVIRONMENT)
    if stage and stage not in STAGES:
        raise InputError(f"{ENVIRONMENT}={stage!r} is not a crash stage ({', '.join(STAGES)})")


def crash_point(stage: str) -> None:
    """SIGKILL this process if the environment asks for a crash at `stage`."""
    if os.environ.get(ENVIRONMENT) == stage:
        os.kill(os.getpid(), signal.SIGKILL)
