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


# Seconds per 1,000 corpus rows of each stage, for each corpus the demo may run on, at its
# defaults (Flickr8k's 40,460 captions; 20,000 compositional scenes) on two x86_64 cores: the
# first screen's estimates (docs/tutorials/getting-started.md). GraSP-VL trains on a sample of
# at most `grasp_rows`, so its time per row is higher on the smaller corpus. Calibrated to each
# stage's "built in" time of a first run on a fresh machine: 5 min 10 s in all on Flickr8k,
# 2 min 57 s on the compositional set.
STAGE_SECONDS_PER_1K_ROWS = {
    "flickr8k": {
        "embed": 2.25,
        "grasp-vl": 3.07,
        "cedar": 1.95,
        "index": 0.18,
        "search": 0.05,
    },
    "compositional": {
        "embed": 1.70,
        "grasp-vl": 6.12,
        "cedar": 0.54,
        "index": 0.11,
        "search": 0.06,
    },
}
