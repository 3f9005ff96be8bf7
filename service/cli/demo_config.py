"""The demo's settings, apart from the job (service/cli/demo.py) so `strata demo --help` is
light."""

from __future__ import annotations

from pydantic import ConfigDict

from training.core.config import ConfigModel


class DemoConfig(ConfigModel):
    """`scenes`: the compositional set's size when Flickr8k is absent; epochs of each transform
    (short: the demo shows the pipeline) and the rows GraSP-VL trains on; `k` hits per example
    search; `seed` of every stage that draws (the corpus, GraSP-VL, CEDAR, the index's training
    sample)."""

    model_config = ConfigDict(frozen=True)

    scenes: int = 20_000
    # GraSP-VL on a 5,000-row sample for 16 epochs: the same steps as 8 epochs on all 11,064
    # usable Flickr8k rows, 40 % of the views to embed, and dev retrieval AP 0.233 against 0.230
    grasp_epochs: int = 16
    grasp_rows: int = 5_000
    cedar_epochs: int = 6
    k: int = 5
    seed: int = 0
    progress: bool = True


# Seconds per 1,000 corpus rows of each stage, measured by `strata demo` on Flickr8k (40,460
# captions) on two quiet x86_64 cores (docs/tutorials/getting-started.md): the first screen's
# estimates.
STAGE_SECONDS_PER_1K_ROWS = {
    "embed": 1.85,
    "grasp-vl": 2.75,
    "cedar": 1.6,
    "index": 0.15,
    "search": 0.1,
}
