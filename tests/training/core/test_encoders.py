"""Encoders: one interface, unit-norm float32 rows, deterministic, loadable from their spec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from training.core.encoders import EncoderSpec, load_encoder
from training.core.errors import InputError


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


class TestSpec:
    def test_minilm(self):
        assert EncoderSpec.parse("minilm") == EncoderSpec("minilm", "all-MiniLM-L6-v2", "builtin")

    def test_truncated_minilm(self):
        spec = EncoderSpec.parse("minilm@layer:3")
        assert spec == EncoderSpec("minilm", "all-MiniLM-L6-v2", "layer:3")
        assert spec.id == "minilm@layer:3" and EncoderSpec.parse(spec.id) == spec

    def test_open_clip_without_weights_is_seeded_random(self):
        spec = EncoderSpec.parse("open_clip:ViT-B-32")
        assert spec.weights == "random:0"
        assert spec.id == "open_clip:ViT-B-32@random:0"
        assert EncoderSpec.parse(spec.id) == spec

    def test_pretrained_tag_and_file(self, tmp_path: Path):
        assert EncoderSpec.parse("open_clip:ViT-B-32@openai").weights == "pretrained:openai"
        ckpt = tmp_path / "w.pt"
        ckpt.write_bytes(b"x")
        spec = EncoderSpec.parse(f"open_clip:ViT-B-32@{ckpt}")
        assert spec.weights == f"file:{ckpt.resolve()}"
        assert EncoderSpec.parse(spec.id) == spec

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("", "empty encoder spec"),
            ("bert", "unknown encoder"),
            ("open_clip:", "unknown encoder"),
            ("open_clip:ViT-B-32@/no/such/file.pt", "checkpoint file not found"),
            ("open_clip:ViT-B-32@random:x", "integer seed"),
            ("open_clip:/no/such/config.json", "config not found"),
            ("minilm@layer:6", "unknown MiniLM variant"),
            ("minilm@layer:x", "unknown MiniLM variant"),
            ("minilm@head:2", "unknown MiniLM variant"),
        ],
    )
    def test_bad_specs_name_the_fault(self, text: str, message: str):
        with pytest.raises(InputError, match=message):
            EncoderSpec.parse(text)

    def test_unknown_architecture_and_tag(self):
        with pytest.raises(InputError, match="unknown open_clip architecture"):
            load_encoder("open_clip:ViT-Nonexistent-99", device="cpu")
        with pytest.raises(InputError, match="no pretrained tag 'not_a_tag'"):
            load_encoder("open_clip:ViT-B-32@not_a_tag", device="cpu")


class TestMiniLM:
    def test_truncated_model_is_the_mean_of_its_layer(self, minilm):
        """minilm@layer:3 = the masked mean of hidden state 3 of the full network, normalised."""
        from training.cosae.pairs import minilm_layer_embeddings

        texts = ["a dog runs on the beach", "two children play football in a park"]
        cut = load_encoder("minilm@layer:3", device="cpu")
        full, layer3 = minilm_layer_embeddings(texts, minilm.model, layer=3)
        np.testing.assert_allclose(cut.encode_text(texts), layer3, atol=1e-5)
        np.testing.assert_allclose(minilm.encode_text(texts), full, atol=1e-5)
        assert cut.id == "minilm@layer:3" and cut.provenance["layers"] == 3
        assert float(np.min(np.sum(cut.encode_text(texts) * full, axis=1))) < 0.99

    def test_shape_norm_dtype(self, minilm):
        vectors = minilm.encode_text(["a dog", "a much longer sentence about a cat on a mat", "x"])
        assert vectors.shape == (3, 384) and vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        assert minilm.dim == 384 and minilm.id == "minilm" and not minilm.has_image_tower

    def test_deterministic_and_order_preserving(self, minilm):
        texts = ["a long caption about two children playing football in a park", "dog", "a cat"]
        together = minilm.encode_text(texts)
        np.testing.assert_array_equal(together, minilm.encode_text(texts))
        one_by_one = np.concatenate([minilm.encode_text([t]) for t in texts])
        np.testing.assert_allclose(together, one_by_one, atol=1e-5)

    def test_repeated_texts_embedded_once(self, minilm, monkeypatch):
        calls: list[int] = []
        encode_batch = minilm._text_batch

        def counting(batch):
            calls.append(len(batch))
            return encode_batch(batch)

        monkeypatch.setattr(minilm, "_text_batch", counting)
        texts = ["a dog", "a red car", "a dog", "a dog", "a red car"]
        repeated = minilm.encode_text(texts)
        assert sum(calls) == 2
        np.testing.assert_array_equal(repeated[0], repeated[2])
        np.testing.assert_allclose(repeated, minilm.encode_text(texts[:2])[[0, 1, 0, 0, 1]])

    def test_sense(self, minilm):
        brown_dog, dog, red_car = minilm.encode_text(["a brown dog", "a dog", "a red car"])
        assert cosine(brown_dog, dog) > cosine(brown_dog, red_car) + 0.2

    def test_no_image_tower(self, minilm):
        with pytest.raises(InputError, match="no image tower"):
            minilm.encode_image(["x.png"])

    def test_empty_input(self, minilm):
        assert minilm.encode_text([]).shape == (0, 384)


class TestOpenClip:
    def test_both_towers(self, tiny_clip, write_png, tmp_path: Path):
        assert tiny_clip.has_image_tower and tiny_clip.dim == 32
        texts = tiny_clip.encode_text(["a photo of a dog", "a red car"])
        red = write_png(tmp_path / "red.png", (255, 0, 0))
        images = tiny_clip.encode_image(
            [red, write_png(tmp_path / "blue.png", (0, 0, 255), (64, 20))]
        )
        for vectors in (texts, images):
            assert vectors.shape == (2, 32) and vectors.dtype == np.float32
            np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        assert not np.allclose(images[0], images[1])
        from PIL import Image

        np.testing.assert_allclose(tiny_clip.encode_image([Image.open(red)]), images[:1], atol=1e-6)

    def test_random_weights_are_seeded_and_recorded(self, tiny_clip, tiny_clip_config: Path):
        again = load_encoder(f"open_clip:{tiny_clip_config}", device="cpu")
        other = load_encoder(f"open_clip:{tiny_clip_config}@random:1", device="cpu")
        texts = ["a dog on the grass"]
        np.testing.assert_array_equal(tiny_clip.encode_text(texts), again.encode_text(texts))
        assert not np.allclose(tiny_clip.encode_text(texts), other.encode_text(texts))
        assert tiny_clip.provenance["kind"] == "random" and tiny_clip.provenance["seed"] == 0

    def test_random_init_leaves_global_rng_alone(self, tiny_clip_config: Path):
        torch.manual_seed(123)
        expected = torch.rand(3)
        torch.manual_seed(123)
        load_encoder(f"open_clip:{tiny_clip_config}@random:5", device="cpu")
        assert torch.equal(torch.rand(3), expected)

    def test_local_checkpoint_file(self, tiny_clip, tiny_clip_config: Path, tmp_path: Path):
        checkpoint = tmp_path / "tiny.pt"
        torch.save({"state_dict": tiny_clip.model.state_dict()}, checkpoint)
        loaded = load_encoder(f"open_clip:{tiny_clip_config}@{checkpoint}", device="cpu")
        texts = ["two people riding bicycles"]
        np.testing.assert_allclose(
            loaded.encode_text(texts), tiny_clip.encode_text(texts), atol=1e-6
        )
        assert loaded.provenance["kind"] == "file" and len(loaded.provenance["sha256"]) == 64

    def test_corrupt_checkpoint_is_a_clear_error(self, tiny_clip_config: Path, tmp_path: Path):
        checkpoint = tmp_path / "broken.pt"
        checkpoint.write_bytes(b"not a checkpoint")
        with pytest.raises(InputError, match="cannot load weights"):
            load_encoder(f"open_clip:{tiny_clip_config}@{checkpoint}", device="cpu")

    def test_trimmed_text_tower_equals_open_clips_own(self, tiny_clip):
        from training.core.encoders.openclip import encode_text_trimmed, has_causal_text_tower

        texts = ["a dog", "two children play football on a wet field next to an old red barn", ""]
        tokens = tiny_clip.tokenizer(texts)
        assert has_causal_text_tower(tiny_clip.model)
        with torch.inference_mode():
            ours = encode_text_trimmed(tiny_clip.model, tokens)
            theirs = tiny_clip.model.encode_text(tokens)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(
            tiny_clip.encode_text(texts), torch.nn.functional.normalize(theirs).numpy(), atol=1e-5
        )

    def test_undecodable_image(self, tiny_clip, tmp_path: Path):
        bad = tmp_path / "bad.jpg"
        bad.write_bytes(b"\xff\xd8 this is not a jpeg")
        with pytest.raises(InputError, match="cannot decode image"):
            tiny_clip.encode_image([bad])
