"""CoSAE's objective and training: switchable terms, exact resume, and what coupling buys."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from training.cosae.baselines import match_concepts, train_uncoupled, with_domain_j_reordered
from training.cosae.config import CosaeConfig, LossWeights
from training.cosae.evaluate import SplitData
from training.cosae.metrics import recall_at_1, shared_factor_recovery, translation_fvu
from training.cosae.model import CoupledSae, encode_rows, load_cosae, save_cosae, translate_rows
from training.cosae.objective import CoupledBatch, coupled_objective, prepare_half, weighted_total
from training.cosae.pairs import split_pair, synthetic_pair
from training.cosae.train import CoupledResult, train_coupled

TERMS = ("reconstruction", "translation", "consistency", "distribution", "cycle", "aux")
# the synthetic comparison: 3000 items (2373 training rows), 10% of them paired, 400 steps
SMALL = {
    "n_concepts": 32,
    "k_i": 4,
    "k_j": 4,
    "steps": 400,
    "batch_size": 128,
    "paired_batch_size": 64,
    "learning_rate": 3e-3,
    "log_every": 100,
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def objective_setup(distribution: str = "sliced"):
    """A fresh model (fixed seed), one fixed batch, fixed directions and dead masks."""
    generator = torch.Generator().manual_seed(0)
    x_i, x_j = torch.randn(40, 6, generator=generator), torch.randn(40, 5, generator=generator)
    model = CoupledSae(6, 5, n_concepts=12, k_i=3, k_j=3, seed=0)
    scales = (prepare_half(model.domain_i, x_i), prepare_half(model.domain_j, x_j))
    batch = CoupledBatch(x_i[:24], x_j[16:], pair_i=x_i[:8], pair_j=x_j[:8])
    directions = torch.randn(12, 8, generator=generator)
    dead = (torch.ones(12, dtype=torch.bool), torch.ones(12, dtype=torch.bool))
    return model, batch, scales, directions, dead


def gradients(weights: LossWeights, distribution: str = "sliced") -> dict[str, torch.Tensor]:
    model, batch, scales, directions, dead = objective_setup(distribution)
    parts = coupled_objective(model, batch, weights, scales, distribution, directions, dead)
    total = weighted_total(parts, weights)
    model.zero_grad()
    if total.requires_grad:
        total.backward()
    return {
        name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
        for name, p in model.named_parameters()
    }


@pytest.mark.parametrize("term", TERMS)
def test_switching_a_term_off_removes_it_and_its_gradient(term: str):
    all_on = LossWeights(**dict.fromkeys(TERMS, 1.0))
    model, batch, scales, directions, dead = objective_setup()
    parts = coupled_objective(model, batch, all_on, scales, "sliced", directions, dead)
    assert set(parts) == set(TERMS)

    off = all_on.model_copy(update={term: 0.0})
    model, batch, scales, directions, dead = objective_setup()
    assert term not in coupled_objective(model, batch, off, scales, "sliced", directions, dead)

    only = LossWeights(**{name: float(name == term) for name in TERMS})
    alone, with_term, without = gradients(only), gradients(all_on), gradients(off)
    assert any(float(g.abs().sum()) > 0 for g in alone.values()), f"{term} gives no gradient"
    for name in with_term:  # all on = (term off) + (term alone), parameter by parameter
        torch.testing.assert_close(with_term[name], without[name] + alone[name])
    nothing = gradients(LossWeights(**dict.fromkeys(TERMS, 0.0)))
    assert all(float(g.abs().sum()) == 0 for g in nothing.values())


@pytest.mark.parametrize("distribution", ["energy", "sorted", "sliced"])
def test_every_distribution_term_is_pluggable_and_differentiable(distribution: str):
    only = LossWeights(**{name: float(name == "distribution") for name in TERMS})
    grads = gradients(only, distribution)
    assert sum(float(g.abs().sum()) for g in grads.values()) > 0


def test_pair_terms_are_skipped_when_a_batch_has_no_pairs():
    model, batch, scales, directions, dead = objective_setup()
    unpaired = CoupledBatch(batch.x_i, batch.x_j)
    parts = coupled_objective(model, unpaired, LossWeights(), scales, "sliced", directions, dead)
    assert "translation" not in parts and "consistency" not in parts
    assert "reconstruction" in parts and "distribution" in parts


def test_config_validates_fraction_and_k():
    with pytest.raises(ValidationError, match="paired_fraction"):
        CosaeConfig(paired_fraction=0.0)
    with pytest.raises(ValidationError, match="paired_fraction"):
        CosaeConfig(paired_fraction=1.5)
    assert CosaeConfig(paired_fraction=0.001).paired_fraction == 0.001
    with pytest.raises(ValidationError, match="exceeds n_concepts"):
        CosaeConfig(n_concepts=8, k_i=9)
    base = CosaeConfig()
    assert base.fingerprint() == base.model_copy(update={"steps": 7}).fingerprint()
    assert base.fingerprint() != base.model_copy(update={"seed": 1}).fingerprint()


def test_training_resumes_from_its_checkpoint_to_the_same_weights(tmp_path: Path):
    pair = synthetic_pair(rows=300, seed=2)
    pairs = np.repeat(np.arange(30)[:, None], 2, axis=1)
    config = CosaeConfig(**{**SMALL, "steps": 40, "log_every": 20, "batch_size": 32})
    straight = train_coupled(pair.x_i, pair.x_j, pairs, config)
    half_way = config.model_copy(update={"steps": 20})
    first = train_coupled(pair.x_i, pair.x_j, pairs, half_way, work_dir=tmp_path)
    assert first.steps_run == 20 and (tmp_path / "checkpoint.pt").is_file()
    resumed = train_coupled(pair.x_i, pair.x_j, pairs, config, work_dir=tmp_path)
    assert resumed.steps_run == 40 and len(resumed.history) == 2
    for name, value in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, msg=name)
    other = pair.x_j.copy()
    other[0] += 1  # other data: the checkpoint is not reused
    fresh = train_coupled(pair.x_i, other, pairs, half_way, work_dir=tmp_path)
    assert fresh.steps_run == 20


def test_a_saved_cosae_loads_back_with_the_same_maps(tmp_path: Path):
    pair = synthetic_pair(rows=200, seed=3)
    config = CosaeConfig(**{**SMALL, "steps": 5})
    model = train_coupled(pair.x_i, pair.x_j, None, config).model
    save_cosae(tmp_path / "art", model, {"note": "test"})
    loaded, manifest = load_cosae(tmp_path / "art")
    assert manifest["note"] == "test" and manifest["n_concepts"] == 32
    np.testing.assert_array_equal(
        translate_rows(loaded, pair.x_i, "i"), translate_rows(model, pair.x_i, "i")
    )


@cache
def synthetic_comparison() -> tuple[SplitData, CoupledResult, CoupledResult, int]:
    pair = synthetic_pair(rows=3000, seed=0)
    data = SplitData.of(pair, split_pair(pair, seed=0))
    pairs = data.pairs(0.1)
    config = CosaeConfig(**SMALL, paired_fraction=0.1)
    coupled = train_coupled(data.train_i, data.train_j, pairs, config)
    uncoupled = train_uncoupled(data.train_i, data.train_j, config)
    return data, coupled, uncoupled, len(pairs)


def test_coupling_recovers_shared_factors_that_uncoupled_saes_do_not():
    data, coupled, uncoupled, _ = synthetic_comparison()

    def recovery(model: CoupledSae) -> float:
        codes_i = encode_rows(model, data.test_i, "i")
        codes_j = encode_rows(model, data.test_j, "j")
        return shared_factor_recovery(codes_i, codes_j, data.test_factors)

    assert recovery(coupled.model) >= 0.75
    assert recovery(coupled.model) > recovery(uncoupled.model) + 0.5


def test_coupling_translates_better_than_chance_and_than_matching_after_training():
    data, coupled, uncoupled, n_pairs = synthetic_comparison()
    translated = translate_rows(coupled.model, data.test_i, "i")
    chance = 1 / len(data.test_j)
    assert recall_at_1(translated, data.test_j) > 10 * chance
    coupled_fvu = translation_fvu(data.test_j, translated)
    assert coupled_fvu < 0.8  # predicting the mean of domain j scores 1
    order = match_concepts(
        encode_rows(uncoupled.model, data.train_i[:n_pairs], "i"),
        encode_rows(uncoupled.model, data.train_j[:n_pairs], "j"),
    )
    matched = with_domain_j_reordered(uncoupled.model, order)
    assert coupled_fvu < translation_fvu(data.test_j, translate_rows(matched, data.test_i, "i"))
