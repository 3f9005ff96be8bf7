"""Strata's typed settings: defaults, overridden by `STRATA_*` environment variables or `.env`.

CLI options take their defaults from here, so `STRATA_DEVICE=cpu strata embed run ...` and
`strata embed run --device cpu ...` mean the same. An option given on the command line wins
over its variable (`--redis-url` over STRATA_REDIS_URL, `--admin-token-file` over
STRATA_ADMIN_TOKEN).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# Where the datasets are looked for when STRATA_DATA_DIR is unset, relative to the working
# directory (the repository's root, for a checkout): its own `data/` first, then
# `../shared/data`, an optional folder beside the checkout that several checkouts can share
# (docs/reference/settings.md#the-data-folder).
DATA_DIRS = (Path("data"), Path("../shared/data"))


def default_data_dir() -> Path:
    """The first of DATA_DIRS that is a folder; `data` when none is (then whatever reads a
    dataset from it says what is missing, and the demo uses its generated corpus)."""
    return next((folder for folder in DATA_DIRS if folder.is_dir()), DATA_DIRS[0])


class StrataSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATA_", env_file=".env", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="where the datasets live (flickr8k/, coco-mini/): data/, else ../shared/data",
    )
    runs_dir: Path = Field(Path("runs"), description="where the demo writes its outputs")
    device: str = Field("auto", description="torch device for encoders: auto, cpu, cuda, cuda:1")
    batch_size: int = Field(128, gt=0, description="encoder batch size")
    shard_rows: int = Field(50_000, gt=0, description="rows per embedding-cache shard")
    cache_dtype: Literal["float16", "float32"] = "float16"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    redis_url: str | None = Field(
        None, description="Redis for the query cache, hot swap and version announcements"
    )
    image_root: Path | None = Field(
        None, description="where `strata serve` resolves a bundle's relative image paths"
    )
    admin_token: str | None = Field(
        None, repr=False, description="the AdminService bearer token (a file is safer)"
    )


def load_settings() -> StrataSettings:
    return StrataSettings()
