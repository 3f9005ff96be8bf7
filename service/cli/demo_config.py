"""The demo's settings, apart from the job (service/cli/demo.py) so `strata demo --help` is
light."""

from __future__ import annotations

from pydantic import ConfigDict

from training.core.config import ConfigModel


class DemoConfig(ConfigModel):
    """`scenes`: the compositional set's size when Flickr8k is absent; epochs of each transform
    (short: the demo shows the pipeline); `k` hits per example search; `seed` of every stage
    that draws (the corpus, GraSP-VL, CEDAR, the index's training sample)."""

    model_config = ConfigDict(frozen=True)

    scenes: int = 20_000
    grasp_epochs: int = 8
    cedar_epochs: int = 6
    k: int = 5
    seed: int = 0
    progress: bool = True
