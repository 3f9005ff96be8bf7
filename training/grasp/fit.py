"""Fitting a GraSP-VL artifact (`fit_grasp`, what `strata train grasp` and the demo call): the
cache's views embedded once (`grasp_set`), the training, and the artifact written; with a
gallery, the rotation fitted to its rows (read by training/grasp/fitting.py)."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from training.core.cache import EmbeddingCache
from training.core.encoders import shared_encoder
from training.core.errors import InputError
from training.core.seeding import seeded
from training.core.settings import load_settings
from training.grasp.config import GraspConfig
from training.grasp.data import GRASP_SET_VERSION, GraspSet, build_from_cache
from training.grasp.train import TrainResult, train_grasp
from training.loop import work_folder

log = logging.getLogger(__name__)


def grasp_set(
    cache_dir: Path,
    encoder_spec: str | None,
    views: Path | None,
    seed: int = 0,
    max_rows: int | None = None,
) -> tuple[GraspSet, str]:
    """The cache's GraspSet, embedded once and kept in `views` (default under the runs folder);
    `seed` draws the negatives mined from captions (caches without view columns) and, with
    `max_rows`, the sample of rows embedded."""
    cache = EmbeddingCache.open(cache_dir)
    spec = encoder_spec or cache.manifest.encoder
    if spec is None:
        raise InputError(
            f"{cache_dir} records no encoder (a clip-retrieval cache?): pass --encoder"
        )
    fingerprint = f"{cache.manifest.to_json()}{spec}v{GRASP_SET_VERSION}"
    if seed:  # seed 0 keeps the key of the views files written before there was a seed
        fingerprint += f"seed{seed}"
    if max_rows is not None:
        fingerprint += f"rows{max_rows}"
    key = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    path = views or load_settings().runs_dir / "grasp-views" / f"{cache_dir.name}-{key}.npz"
    if path.is_file():
        log.info("using the embedded views in %s", path)
        return GraspSet.load(path), spec
    encoder = shared_encoder(spec, load_settings().device)
    data = build_from_cache(cache, encoder, seed, max_rows)
    data.save(path)
    return data, spec


def fit_grasp(
    cache: Path,
    out: Path,
    config: GraspConfig,
    work: Path | None = None,
    views: Path | None = None,
    encoder: str | None = None,
    device: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    gallery: Path | None = None,
    gallery_split: str = "all",
) -> TrainResult:
    """Train GraSP-VL on a cache and write the artifact to `out` (checkpoints in OUT.work).

    With `gallery`, the rotation is fitted to that cache's rows (its `gallery_split`): the
    gallery the bundle will index (see GalleryFit)."""
    from training.grasp.fitting import gallery_fit

    with seeded(config.seed):  # the gallery fit's numpy sums too, not only the training
        data, spec = grasp_set(cache, encoder, views, config.seed, config.max_rows)
        fit = gallery_fit(cache, gallery, gallery_split, spec, config) if gallery else None
        result = train_grasp(
            data,
            config,
            work_folder(out, work),
            encoder=spec,
            device=device,
            progress=progress,
            fit=fit,
        )
    result.artifact.save(out, overwrite=overwrite)
    return result
