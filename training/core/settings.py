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


class StrataSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATA_", env_file=".env", extra="ignore")

    data_dir: Path = Field(Path("../shared/data"), description="where the shared datasets live")
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
