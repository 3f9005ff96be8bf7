"""SAE baselines: each kind learns a sparse dictionary, keeps ≤ k codes, and is deterministic."""

from __future__ import annotations

import hashlib
from functools import cache
from itertools import pairwise

import numpy as np
import pytest
import torch
from safetensors.torch import save as save_safetensors

from training.core.metrics import fraction_of_variance_unexplained
from training.sae.base import SparseAutoencoder
from training.sae.config import SaeConfig
from training.sae.matryoshka import matryoshka_prefixes
from training.sae.registry import SAE_KINDS, make_sae
from training.sae.train import reconstruct, train_sae

DIM, ATOMS, ACTIVE = 16, 32, 3  # M = 8 · 16 = 128 latents


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sparse_rows(n: int, seed: int) -> np.ndarray:
    """Rows = 3 of 32 fixed unit atoms with weights in [0.5, 1.5], plus noise of std 0.01."""
    atoms = np.random.default_rng(0).standard_normal((ATOMS, DIM))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    weights = np.zeros((n, ATOMS))
    for row in weights:
        row[rng.choice(ATOMS, ACTIVE, replace=False)] = rng.uniform(0.5, 1.5, ACTIVE)
    return (weights @ atoms + 0.01 * rng.standard_normal((n, DIM))).astype(np.float32)


TRAIN, VAL = sparse_rows(400, seed=1), sparse_rows(200, seed=2)


def small_config(kind: str, **changes) -> SaeConfig:
    """A few dozen steps. L1 learns slower than top-k and its codes are not sparse enough for
    top-4: the ReLU SAE gets more, smaller steps and is judged at k = 8."""
    settings = {"k": 4, "batch_size": 64, "epochs": 8, "lr": 3e-3}
    if kind == "relu":
        settings.update(k=8, batch_size=32, lr=1e-2, l1=0.5)
    return SaeConfig(kind=kind, **{**settings, **changes})


@cache
def trained(kind: str) -> tuple[SparseAutoencoder, list[dict]]:
    return train_sae(TRAIN, VAL, small_config(kind), progress=False)


@pytest.mark.parametrize("kind", SAE_KINDS)
def test_each_kind_learns_the_sparse_dictionary(kind: str):
    model, history = trained(kind)
    assert (model.dim, model.n_latents) == (DIM, 8 * DIM)
    with torch.no_grad():
        nothing = model.decode(torch.zeros(len(VAL), model.n_latents)).numpy()
    no_latent = fraction_of_variance_unexplained(VAL, nothing)
    assert min(h["val_fvu"] for h in history) < 0.5 * no_latent
    assert set(history[0]) >= {"epoch", "train_loss", "val_fvu", "seconds"}
    assert [h["epoch"] for h in history] == list(range(1, len(history) + 1))


@pytest.mark.parametrize("kind", SAE_KINDS)
def test_returned_model_is_the_best_validation_epoch(kind: str):
    model, history = trained(kind)
    fvu = fraction_of_variance_unexplained(VAL, reconstruct(model, VAL, model.k))
    assert fvu == pytest.approx(min(h["val_fvu"] for h in history), rel=1e-4)


@pytest.mark.parametrize("kind", SAE_KINDS)
@pytest.mark.parametrize("k", [1, 3, 7, 128])
def test_encode_keeps_the_k_largest_activations_per_row(kind: str, k: int):
    model, _ = trained(kind)
    x = torch.as_tensor(VAL)
    with torch.no_grad():
        codes, acts = model.encode(x, k), model.activations(x)
    assert codes.shape == (len(VAL), model.n_latents)
    assert (codes >= 0).all()
    assert ((codes > 0).sum(dim=1) <= k).all()
    top = acts.topk(k, dim=1).values
    assert torch.allclose(codes.topk(k, dim=1).values, top)


def test_reconstruct_is_decode_of_encode_at_k():
    model, _ = trained("topk")
    out = reconstruct(model, VAL, 3, batch_size=7)
    with torch.no_grad():
        expected = model.decode(model.encode(torch.as_tensor(VAL), 3)).numpy()
    assert out.dtype == np.float32 and out.shape == VAL.shape
    np.testing.assert_allclose(out, expected, atol=1e-6)


def fvu_at(model: SparseAutoencoder, ks: range) -> list[float]:
    return [fraction_of_variance_unexplained(VAL, reconstruct(model, VAL, k)) for k in ks]


def test_topk_fvu_does_not_grow_with_k_up_to_the_trained_k():
    """Past it, a fixed-k TopK SAE's extra latents are uncalibrated (Gao et al. 2024)."""
    fvus = fvu_at(trained("topk")[0], range(1, 5))
    assert all(b <= a + 1e-4 for a, b in pairwise(fvus))


def test_topk_trained_over_a_k_range_improves_up_to_its_top():
    config = small_config("topk", k_range=(2, 8), epochs=6, lr=1e-2, batch_size=32)
    model, _ = train_sae(sparse_rows(2000, seed=3), VAL, config, progress=False)
    fvus = fvu_at(model, range(1, 9))
    assert all(b <= a + 1e-4 for a, b in pairwise(fvus[:7]))
    # k is drawn log-uniformly, so the top of the range is visited least: flat there, not worse
    assert fvus[7] <= fvus[6] + 2e-3


@pytest.mark.parametrize("kind", SAE_KINDS)
def test_decoder_columns_have_unit_norm(kind: str):
    """TopK, BatchTopK, Matryoshka constrain them; the ReLU SAE's norms are folded at the end."""
    model, _ = trained(kind)
    for directions in (model.w_dec, model.dictionary()):
        norms = directions.detach().norm(dim=0)
        torch.testing.assert_close(norms, torch.ones_like(norms), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["batchtopk", "matryoshka"])
def test_batch_top_k_keeps_k_per_sample_on_average(kind: str):
    model, history = trained(kind)
    assert all(h["l0"] == pytest.approx(4.0) for h in history)
    assert model.threshold > 0
    with torch.no_grad():
        codes = model.encode(torch.as_tensor(VAL))  # JumpReLU at the learned threshold
    assert (codes[codes > 0] > model.threshold).all()
    assert 2 < float((codes > 0).sum(dim=1).float().mean()) < 8


def test_auxk_reconstructs_the_residual_with_dead_latents_only():
    model = make_sae("topk", DIM, 8 * DIM, k=4)
    x = torch.as_tensor(TRAIN[:32])
    codes, acts = model.training_codes(x, 4)
    _, recon = model.reconstruction_loss(x, codes, variance=1.0)
    dead = torch.zeros(model.n_latents, dtype=torch.bool)
    assert model.aux_loss(x, recon, acts, dead, variance=1.0) == 0
    dead[:10] = True
    model.aux_loss(x, recon, acts, dead, variance=1.0).backward()
    touched = model.w_enc.grad.abs().sum(dim=1) > 0
    assert touched[:10].any() and not touched[10:].any()


def test_progress_bar_shows_the_loss(capsys: pytest.CaptureFixture[str]):
    train_sae(TRAIN, VAL, small_config("topk", epochs=1), progress=True)
    assert "loss=" in capsys.readouterr().err


def test_matryoshka_prefixes_are_nested_fractions():
    assert matryoshka_prefixes(128) == (8, 16, 32, 64, 128)
    assert matryoshka_prefixes(3) == (1, 3)


@pytest.mark.parametrize("kind", SAE_KINDS)
def test_same_seed_gives_identical_weights(kind: str):
    def weights(seed: int) -> dict[str, torch.Tensor]:
        config = small_config(kind, epochs=2, seed=seed, k_range=(2, 6))
        return train_sae(TRAIN, VAL, config, progress=False)[0].state_dict()

    def digest(state: dict[str, torch.Tensor]) -> str:  # of the weights as a file holds them
        return hashlib.sha256(
            save_safetensors({n: t.contiguous() for n, t in state.items()})
        ).hexdigest()

    first, again, other = weights(0), weights(0), weights(1)
    assert digest(first) == digest(again)
    assert digest(first) != digest(other)
    assert not torch.equal(first["w_dec"], other["w_dec"])


def test_early_stopping_respects_patience():
    _, history = train_sae(
        TRAIN, VAL, small_config("topk", lr=10.0, epochs=20, patience=2), progress=False
    )
    best = int(np.argmin([h["val_fvu"] for h in history]))
    assert len(history) < 20
    assert len(history) == best + 1 + 2


@pytest.mark.parametrize(
    ("changes", "fault"),
    [
        ({"kind": "jumprelu"}, "jumprelu"),
        ({"k": 0}, "k must"),
        ({"expansion": 0}, "expansion"),
        ({"k_range": (6, 2)}, "k_range"),
        ({"k_range": (0, 2)}, "k_range"),
        ({"l1": -1.0}, "l1"),
        ({"lr": 0.0}, "lr"),
        ({"patience": 0}, "patience"),
    ],
)
def test_bad_config_is_refused(changes: dict, fault: str):
    with pytest.raises(ValueError, match=fault):
        SaeConfig(**{"kind": "topk", **changes})


@pytest.mark.parametrize(
    ("train", "val", "config", "fault"),
    [
        (TRAIN[0], VAL, small_config("topk"), "2-d"),
        (np.where(np.arange(DIM) == 3, np.nan, TRAIN), VAL, small_config("topk"), "NaN"),
        (TRAIN[:0], VAL, small_config("topk"), "empty"),
        (TRAIN, VAL[:, :8], small_config("topk"), "dim"),
        (TRAIN, VAL, small_config("topk", k=129), r"k must be .*128"),
        (TRAIN, VAL, small_config("batchtopk", k_range=(2, 200)), r"k must be .*128"),
        (TRAIN, VAL[:1], small_config("relu"), "at least 2"),
        (np.ones_like(TRAIN), VAL, small_config("relu"), "identical"),
        (np.zeros_like(TRAIN), VAL, small_config("topk"), "identical"),
    ],
)
def test_bad_training_input_is_refused(train, val, config: SaeConfig, fault: str):
    with pytest.raises(ValueError, match=fault):
        train_sae(train, val, config, progress=False)


def test_bad_inference_input_is_refused():
    model = make_sae("topk", DIM, 8 * DIM, k=4)
    with pytest.raises(ValueError, match="k must"):
        reconstruct(model, VAL, 0)
    with pytest.raises(ValueError, match="k must"):
        model.encode(torch.as_tensor(VAL), 129)
    with pytest.raises(ValueError, match="dim"):
        reconstruct(model, VAL[:, :8], 4)
    with pytest.raises(ValueError, match="NaN"):
        reconstruct(model, np.full_like(VAL, np.nan), 4)
    with pytest.raises(ValueError, match="unknown SAE kind 'gated'"):
        make_sae("gated", DIM, 8 * DIM)


def test_the_registry_maps_every_typed_name_to_its_class_with_one_state_layout():
    """The names users type keep working, and every variant saves the same tensors, so a file
    saved by one version loads into the class its name gives."""
    assert SAE_KINDS == ("topk", "batchtopk", "relu", "matryoshka")
    layouts = set()
    for kind in SAE_KINDS:
        model = make_sae(kind, DIM, 8 * DIM, k=4)
        assert model.kind == kind and isinstance(model, SparseAutoencoder)
        layouts.add(tuple(sorted(model.state_dict())))
    assert layouts == {("b_dec", "b_enc", "input_scale", "threshold", "w_dec", "w_enc")}
