"""Corpus readers: records in a stable order; malformed entries skipped and counted, or an error."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from training.core.errors import InputError
from training.corpora import (
    CompositionalCorpus,
    MalformedInputError,
    open_corpus,
)
from training.corpora.compositional import ATTRIBUTES, RELATIONS, SUBJECTS, noun_phrase

FLICKR_LINES = [
    "img1.jpg#0\tA dog runs .",
    "img1.jpg#1\tA brown dog runs on grass .",
    "img2.jpg#0\tTwo children play .",
    "this line has no tab",
    "img2.jpg\tno caption number",
    "img3.jpg#0\t   ",
    "",
    "img3.jpg#1\tA man rides a bike .",
    "img9.jpg.1#0\tan image in no split",
]


@pytest.fixture
def flickr_dir(tmp_path: Path) -> Path:
    (tmp_path / "Flickr8k.token.txt").write_text("\n".join(FLICKR_LINES) + "\n")
    (tmp_path / "Flickr_8k.trainImages.txt").write_text("img1.jpg\nimg3.jpg\n")
    (tmp_path / "Flickr_8k.devImages.txt").write_text("img2.jpg\n")
    (tmp_path / "Flickr_8k.testImages.txt").write_text("")
    return tmp_path


class TestFlickr8k:
    def test_records_and_groups(self, flickr_dir: Path):
        corpus = open_corpus("flickr8k", flickr_dir)
        records = list(corpus)
        assert [r.id for r in records] == [
            "img1.jpg#0",
            "img1.jpg#1",
            "img2.jpg#0",
            "img3.jpg#1",
            "img9.jpg.1#0",
        ]
        assert records[1].group == "img1.jpg" and records[1].text == "A brown dog runs on grass ."
        assert [r.fields["split"] for r in records] == ["train", "train", "dev", "train", "none"]
        assert corpus.size_hint() == 8  # non-empty lines; a progress bar total, not a count

    def test_malformed_lines_are_counted_with_line_numbers(self, flickr_dir: Path):
        corpus = open_corpus("flickr8k", flickr_dir)
        list(corpus)
        assert corpus.report.skipped == 3
        assert [e.split(":")[1] for e in corpus.report.examples] == ["4", "5", "6"]
        list(corpus)  # iterating again does not double the count
        assert corpus.report.skipped == 3

    def test_strict_mode_raises_on_the_first_bad_line(self, flickr_dir: Path):
        with pytest.raises(MalformedInputError, match=r"Flickr8k\.token\.txt:4"):
            list(open_corpus("flickr8k", flickr_dir, on_malformed="error"))

    def test_split(self, flickr_dir: Path):
        dev = open_corpus("flickr8k", flickr_dir, split="dev")
        assert [r.id for r in dev] == ["img2.jpg#0"] and dev.size_hint() == 1

    def test_bad_inputs(self, flickr_dir: Path, tmp_path: Path):
        with pytest.raises(InputError, match="not a Flickr8k folder"):
            open_corpus("flickr8k", tmp_path / "nowhere")
        with pytest.raises(InputError, match="unknown Flickr8k split"):
            open_corpus("flickr8k", flickr_dir, split="validation")


class TestCoco:
    def make(self, root: Path, write_png) -> Path:
        write_png(root / "images" / "a.jpg", (200, 10, 10))
        write_png(root / "images" / "b.jpg", (10, 200, 10))
        data = {
            "images": [
                {"id": 1, "file_name": "a.jpg"},
                {"id": 2, "file_name": "b.jpg"},
                {"id": 3, "file_name": "missing.jpg"},
            ],
            "annotations": [
                {"id": 10, "image_id": 2, "caption": "a green square"},
                {"id": 11, "image_id": 1, "caption": "a red square"},
                {"id": 12, "image_id": 1, "caption": "red"},
                {"id": 13, "image_id": 7, "caption": "no such image"},
                {"id": 14, "image_id": 3, "caption": "image file is missing"},
                {"id": 15, "image_id": 2, "caption": ""},
            ],
        }
        (root / "captions.json").write_text(json.dumps(data))
        return root

    def test_captions_grouped_by_image(self, tmp_path: Path, write_png):
        corpus = open_corpus("coco", self.make(tmp_path, write_png))
        records = list(corpus)
        assert [(r.id, r.group) for r in records] == [
            ("11", "a.jpg"),
            ("12", "a.jpg"),
            ("10", "b.jpg"),
        ]
        assert all(Path(r.image_path).is_file() for r in records)
        assert corpus.report.skipped == 3
        assert any("unknown image_id 7" in e for e in corpus.report.examples)
        assert any("image missing" in e for e in corpus.report.examples)

    def test_not_coco(self, tmp_path: Path):
        (tmp_path / "images").mkdir()
        (tmp_path / "captions.json").write_text('{"info": {}}')
        with pytest.raises(InputError, match="lacks COCO"):
            list(open_corpus("coco", tmp_path))
        with pytest.raises(InputError, match="no COCO captions JSON"):
            open_corpus("coco", tmp_path / "elsewhere")


class TestFiles:
    def test_image_folder(self, tmp_path: Path, write_png):
        write_png(tmp_path / "b" / "two.png", (0, 0, 0))
        write_png(tmp_path / "one.png", (9, 9, 9))
        (tmp_path / "notes.txt").write_text("not an image")
        corpus = open_corpus("images", tmp_path)
        assert [r.id for r in corpus] == ["b/two.png", "one.png"]
        assert corpus.report.skipped == 1 and "notes.txt" in corpus.report.examples[0]

    def test_jsonl(self, tmp_path: Path):
        path = tmp_path / "texts.jsonl"
        lines = [
            '{"id": "a", "text": "first", "lang": "en"}',
            "{not json",
            '{"text": "second", "group": "g"}',
            '{"id": "a", "text": "duplicate id"}',
            '{"id": "c"}',
            "[1, 2]",
        ]
        path.write_text("\n".join(lines) + "\n")
        corpus = open_corpus("texts", path)
        records = list(corpus)
        assert [(r.id, r.text, r.group) for r in records] == [
            ("a", "first", "a"),
            ("3", "second", "g"),
        ]
        assert records[0].fields == {"lang": "en"}
        assert corpus.report.skipped == 4
        reasons = " ".join(corpus.report.examples)
        for reason in ("invalid JSON", "duplicate id", "missing or empty 'text'", "JSON object"):
            assert reason in reasons

    def test_csv(self, tmp_path: Path):
        path = tmp_path / "texts.csv"
        path.write_text(
            'id,text,image_path\nx,"a caption, with a comma",pic.png\ny,,\nz,t,u,surplus\n'
        )
        corpus = open_corpus("texts", path)
        records = list(corpus)
        assert [r.text for r in records] == ["a caption, with a comma"]
        assert records[0].image_path == str((tmp_path / "pic.png").resolve())
        assert corpus.report.skipped == 2

    def test_csv_without_text_column(self, tmp_path: Path):
        path = tmp_path / "t.csv"
        path.write_text("id,caption\n1,x\n")
        with pytest.raises(InputError, match="no 'text' column"):
            list(open_corpus("texts", path))

    def test_unknown_kind_and_missing_path(self, tmp_path: Path):
        with pytest.raises(InputError, match="unknown corpus kind"):
            open_corpus("laion", tmp_path)
        with pytest.raises(InputError, match="needs a path"):
            open_corpus("texts")
        with pytest.raises(InputError, match=r"\.jsonl or \.csv"):
            (tmp_path / "t.txt").write_text("x")
            open_corpus("texts", tmp_path / "t.txt")


class TestCompositional:
    def test_reproducible_and_independent_of_size(self):
        small = list(CompositionalCorpus(scenes=50, seed=3))
        large = list(CompositionalCorpus(scenes=5000, seed=3))
        assert small == large[:50] == list(CompositionalCorpus(scenes=50, seed=3))
        assert small != list(CompositionalCorpus(scenes=50, seed=4))

    def test_splits_partition_the_scenes(self):
        every = list(CompositionalCorpus(scenes=6000, seed=1))
        counts = Counter(r.fields["split"] for r in every)
        assert set(counts) == {"train", "val", "test"}
        assert 0.75 < counts["train"] / 6000 < 0.85
        parts = [
            {r.id for r in CompositionalCorpus(scenes=6000, seed=1, split=s)}
            for s in ("train", "val", "test")
        ]
        assert sum(map(len, parts)) == 6000 and set.union(*parts) == {r.id for r in every}

    def test_views_and_factors_agree_with_the_caption(self):
        for record in CompositionalCorpus(scenes=300, seed=0):
            f = record.fields
            assert record.text == f["view_caption"]
            assert f["view_object"].split()[-1] == f["subject"]
            assert f["view_attribute"].split()[-2:] == [f["subject_attribute"], f["subject"]]
            assert f["relation"] in f["view_relation"] and f["object"] in f["view_relation"]
            assert record.text.endswith(f["place"])
            assert f["anchor_text"].startswith(f["place"]) and f["anchor_text"] != record.text
            assert f"{f['subject']} is {f['relation']}" in f["anchor_text"]

    def test_each_negative_changes_exactly_its_factor(self):
        for record in CompositionalCorpus(scenes=300, seed=0):
            f, caption = record.fields, record.text
            subject = noun_phrase(f["subject_attribute"], f["subject"])
            thing = noun_phrase(f["object_attribute"], f["object"])
            assert caption == f"{subject} {f['relation']} {thing} {f['place']}"
            rest = f" {f['relation']} {thing} {f['place']}"

            swapped_subject = f["neg_object"].removesuffix(rest).split()[-1]
            assert f["neg_object"].endswith(rest) and swapped_subject in SUBJECTS
            assert swapped_subject != f["subject"]

            swapped_attribute = f["neg_attribute"].removesuffix(rest).split()[-2]
            assert f["neg_attribute"] == noun_phrase(swapped_attribute, f["subject"]) + rest
            assert swapped_attribute in ATTRIBUTES and swapped_attribute != f["subject_attribute"]

            relations = [r for r in RELATIONS if r != f["relation"]]
            assert f["neg_relation"] in {f"{subject} {r} {thing} {f['place']}" for r in relations}

            assert f["neg_order"] == f"{thing} {f['relation']} {subject} {f['place']}"
            assert f["neg_order"] != caption

    def test_bad_arguments(self):
        with pytest.raises(InputError, match="at least one scene"):
            CompositionalCorpus(scenes=0)
        with pytest.raises(InputError, match="unknown split"):
            CompositionalCorpus(split="dev")
        with pytest.raises(InputError, match="summing to 1"):
            CompositionalCorpus(fractions=(0.5, 0.2, 0.2))
