"""COCO-format captions (`captions.json`: images + annotations) with their image folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.core.errors import InputError
from training.corpora.records import Corpus, OnMalformed, Record


class CocoCaptionsCorpus(Corpus):
    """One record per caption, captions of one image adjacent; `group` is the image file name.

    `path` is either the captions JSON or a folder holding `captions.json` (or
    `annotations/captions_*.json`) and `images/`. Captions whose image entry or file is missing
    are skipped and counted.
    """

    kind = "coco"

    def __init__(
        self,
        path: str | Path,
        images: str | Path | None = None,
        on_malformed: OnMalformed = "skip",
    ) -> None:
        super().__init__(on_malformed)
        self.captions_file = _find_captions_file(Path(path).expanduser())
        self.image_dir = (
            Path(images).expanduser() if images else self.captions_file.parent / "images"
        )
        if not self.image_dir.is_dir():
            raise InputError(f"COCO image folder not found: {self.image_dir}")

    def records(self) -> Iterator[Record]:
        try:
            data = json.loads(self.captions_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{self.captions_file} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or not {"images", "annotations"} <= data.keys():
            raise InputError(f"{self.captions_file} lacks COCO 'images' and 'annotations' lists")
        files = {
            image["id"]: image["file_name"]
            for image in data["images"]
            if isinstance(image, dict) and "id" in image and "file_name" in image
        }
        annotations = sorted(
            (a for a in data["annotations"] if isinstance(a, dict)),
            key=lambda a: (str(files.get(a.get("image_id"), "")), str(a.get("id", ""))),
        )
        where = self.captions_file.name
        for annotation in annotations:
            ann_id, image_id = annotation.get("id"), annotation.get("image_id")
            caption = annotation.get("caption")
            if image_id not in files:
                self.report.malformed(
                    f"{where} annotation {ann_id}", f"unknown image_id {image_id}"
                )
                continue
            if not isinstance(caption, str) or not caption.strip():
                self.report.malformed(f"{where} annotation {ann_id}", "missing or empty caption")
                continue
            image_path = self.image_dir / files[image_id]
            if not image_path.is_file():
                self.report.malformed(
                    f"{where} annotation {ann_id}", f"image missing: {image_path}"
                )
                continue
            yield Record(
                id=str(ann_id),
                text=caption.strip(),
                image_path=str(image_path.resolve()),
                group=files[image_id],
                fields={"image_id": str(image_id)},
            )

    def image_root(self) -> Path:
        return self.image_dir.resolve()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.captions_file.resolve()),
            "images": str(self.image_dir.resolve()),
        }


def _find_captions_file(path: Path) -> Path:
    if path.is_file():
        return path
    if path.is_dir():
        candidates = [path / "captions.json", *sorted(path.glob("annotations/captions_*.json"))]
        for candidate in candidates:
            if candidate.is_file():
                return candidate
    raise InputError(f"no COCO captions JSON at {path}")
