"""How CDS is measured: `CdsConfig`, validated in full before any image is read."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from training.cds.outliers import DEFAULT_RATIO, DEFAULT_ROBUST_Z
from training.core.config import ConfigModel

PositiveInt = Annotated[int, Field(strict=True, ge=1)]  # no bool, no float: an integer >= 1


class CdsConfig(ConfigModel):
    """How CDS is measured: top-m images, shift s (patches), layer, threshold rule, batching,
    and the outlier rule's z and ratio (both > 0)."""

    model_config = ConfigDict(frozen=True)

    top_m: PositiveInt = 10
    shift: PositiveInt = 1
    layer: int | None = None
    threshold: str = "auto"
    batch_size: PositiveInt = 8
    outlier_z: float = Field(DEFAULT_ROBUST_Z, gt=0)
    outlier_ratio: float = Field(DEFAULT_RATIO, gt=0)
