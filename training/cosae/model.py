"""The coupled model: two TopK SAEs, one per domain, with one shared concept index.

Each half is a TopK SAE (`training.sae.topk.TopKSae`, Gao et al. 2024): codes
f_d = TopK_{k_d}(ReLU(W_enc,d (s_d x_d − b_dec,d) + b_enc,d)), reconstruction
x̂_d = (W_dec,d f_d + b_dec,d) / s_d with unit-norm decoder columns. Both halves have M concepts;
concept c of domain i and concept c of domain j are the same concept by construction of the
training objective (`training.cosae.objective`), so a code of one domain can be decoded by the
other: translation i → j is D_j(E_i(x_i)).

On disk (`save_cosae` / `load_cosae`): a folder with `manifest.json` (format, method, the two
domains' names and dimensions, M, k_i, k_j, the training config, data fingerprint, metrics) and
`weights.safetensors` (the state of both halves, keys `domain_i.*` and `domain_j.*`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from training.core.errors import InputError
from training.core.files import atomic_write_bytes
from training.sae.topk import TopKSae

COSAE_FORMAT = "strata.cosae/1"
DOMAINS = ("i", "j")


class CoupledSae(torch.nn.Module):
    """Two TopK SAEs sharing the concept index: `domain_i` [D_i ↔ M], `domain_j` [D_j ↔ M]."""

    def __init__(
        self, dim_i: int, dim_j: int, n_concepts: int, k_i: int, k_j: int, seed: int = 0
    ) -> None:
        super().__init__()
        self.domain_i = TopKSae(dim_i, n_concepts, k=k_i, seed=seed)
        self.domain_j = TopKSae(dim_j, n_concepts, k=k_j, seed=seed + 1)
        self.n_concepts = n_concepts

    def half(self, domain: str) -> TopKSae:
        """The SAE of domain `i` or `j`."""
        if domain not in DOMAINS:
            raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
        return self.domain_i if domain == "i" else self.domain_j

    def encode(self, x: torch.Tensor, domain: str) -> torch.Tensor:
        """TopK codes [N, M] of rows of one domain, at that domain's k."""
        return self.half(domain).encode(x)

    def reconstruct(self, x: torch.Tensor, domain: str) -> torch.Tensor:
        """D_d(E_d(x)): the domain's own reconstruction."""
        half = self.half(domain)
        return half.decode(half.encode(x))

    def translate(self, x: torch.Tensor, source: str) -> torch.Tensor:
        """D_target(E_source(x)): rows of `source` expressed in the other domain."""
        target = "j" if source == "i" else "i"
        return self.half(target).decode(self.encode(x, source))


# --- numpy views, batched, for evaluation ------------------------------------------------------


@torch.no_grad()
def encode_rows(model: CoupledSae, x: np.ndarray, domain: str, batch: int = 4096) -> np.ndarray:
    """Codes [N, M] (float32) of one domain's rows."""
    return _batched(lambda t: model.encode(t, domain), model, x, batch)


@torch.no_grad()
def reconstruct_rows(
    model: CoupledSae, x: np.ndarray, domain: str, batch: int = 4096
) -> np.ndarray:
    """D_d(E_d(x)) [N, D_d] (float32)."""
    return _batched(lambda t: model.reconstruct(t, domain), model, x, batch)


@torch.no_grad()
def translate_rows(model: CoupledSae, x: np.ndarray, source: str, batch: int = 4096) -> np.ndarray:
    """D_other(E_source(x)) [N, D_other] (float32)."""
    return _batched(lambda t: model.translate(t, source), model, x, batch)


def _batched(function: Any, model: CoupledSae, x: np.ndarray, batch: int) -> np.ndarray:
    was_training = model.training
    model.eval()
    device = model.domain_i.w_dec.device
    rows = np.ascontiguousarray(x, dtype=np.float32)
    parts = [
        function(torch.as_tensor(rows[start : start + batch], device=device)).cpu().numpy()
        for start in range(0, len(rows), batch)
    ]
    model.train(was_training)
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


# --- the artifact ------------------------------------------------------------------------------


def save_cosae(out: Path, model: CoupledSae, manifest: dict[str, Any]) -> None:
    """Write `weights.safetensors` then `manifest.json` (each atomically) into `out`."""
    state = {name: value.detach().cpu().contiguous() for name, value in model.state_dict().items()}
    atomic_write_bytes(out / "weights.safetensors", save_safetensors(state))
    full = {
        "format": COSAE_FORMAT,
        "method": "cosae",
        "dim_i": model.domain_i.dim,
        "dim_j": model.domain_j.dim,
        "n_concepts": model.n_concepts,
        "k_i": model.domain_i.k,
        "k_j": model.domain_j.k,
        **manifest,
    }
    atomic_write_bytes(out / "manifest.json", (json.dumps(full, indent=2) + "\n").encode())


def load_cosae(path: Path) -> tuple[CoupledSae, dict[str, Any]]:
    """The model and manifest saved by `save_cosae`; InputError when it is not one."""
    manifest_path, weights_path = path / "manifest.json", path / "weights.safetensors"
    if not manifest_path.is_file() or not weights_path.is_file():
        raise InputError(f"not a CoSAE artifact (manifest.json, weights.safetensors): {path}")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != COSAE_FORMAT:
        raise InputError(f"{path}: unsupported CoSAE format {manifest.get('format')!r}")
    model = CoupledSae(
        manifest["dim_i"],
        manifest["dim_j"],
        manifest["n_concepts"],
        manifest["k_i"],
        manifest["k_j"],
    )
    model.load_state_dict(load_safetensors(weights_path.read_bytes()))
    model.eval()
    return model, manifest
