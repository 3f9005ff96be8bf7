"""Patch tokens of a ViT image tower, per-patch joint embeddings, and the features read off them.

A `PatchModel` turns a batch of crops into, per patch, (1) the token after a chosen layer and
(2) that token's embedding in the joint image-text space. For an open_clip ViT
(`open_clip.transformer.VisionTransformer`, whose forward is `_embeds` → `transformer` →
`_pool` → `@ proj`):

    x₀ = ln_pre([class; conv1(pixels) patches] + positional embedding)      (`_embeds`)
    x_L = resblocks[:L](x₀)                        the token sequence after layer L
    t_i = x_L[1 + i]                               patch token i (the class token dropped)
    e_i = normalise(ln_post(t_i) @ proj)           patch i's joint-space embedding

i.e. the final norm and projection the pooled (class) token goes through, applied to every
patch token of layer L (L = the last layer by default, giving the usual dense CLIP patch
embeddings). Towers with an attentional pooler, or other than a ViT, are refused.

Features (`FeatureSet`): non-negative activation maps over the patch grid.

- CEDAR concepts of an artifact (rotation U [D, D], mean b, D = the joint dimension): with
  z_i = U(e_i − b), concept 2j (+ axis j) has activation max(z_ij, 0) and concept 2j + 1
  (− axis j) has max(−z_ij, 0) at patch i (`concept_activations`);
- SAE latents of a sparse autoencoder trained on the patch tokens t_i (`sae_activations`:
  the SAE's k largest codes of each token, `training.sae`);
- plain channels max(t_ij, 0) (the constructed model's ground-truth features).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from training.core.errors import InputError


class PatchModel(abc.ABC):
    """A ViT-like image tower seen as a p × p grid of n-pixel patches."""

    name: str
    grid: int  # p
    patch_size: int  # n
    width: int  # token dimension
    embed_dim: int  # joint-space dimension
    n_layers: int
    device: str = "cpu"

    def resolve_layer(self, layer: int | None) -> int:
        """The number of blocks L to run: None → all; −k counts from the end (−1 → all)."""
        if layer is None:
            return self.n_layers
        if isinstance(layer, bool) or not -self.n_layers <= int(layer) <= self.n_layers:
            raise InputError(
                f"--layer must be between 0 and {self.n_layers} (or -{self.n_layers}..-1) for "
                f"{self.name}, which has {self.n_layers} blocks; got {layer}"
            )
        layer = int(layer)
        return layer if layer >= 0 else self.n_layers + 1 + layer

    def crop_tensor(self, images: Sequence[Any]) -> torch.Tensor:
        """[B, 3, p·n, p·n] RGB values in [0, 1] of PIL crops of exactly p·n pixels (ValueError
        for a crop of another size): what `pixels` normalises."""
        size = self.grid * self.patch_size
        arrays = []
        for image in images:
            if image.size != (size, size):
                raise ValueError(f"crops must be {size} x {size} pixels, got {image.size}")
            arrays.append(np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0)
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)

    @abc.abstractmethod
    def pixels(self, images: Sequence[Any]) -> torch.Tensor:
        """[B, 3, p·n, p·n] model input for PIL crops of exactly p·n pixels."""

    @abc.abstractmethod
    def forward(self, pixels: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(patch tokens [B, p², width] after `layer` blocks, joint embeddings [B, p², embed])."""


class OpenClipPatches(PatchModel):
    """An open_clip ViT image tower; see the module docstring for the maths."""

    def __init__(self, model: Any, name: str, device: str = "cpu") -> None:
        from open_clip.transformer import VisionTransformer

        visual = getattr(model, "visual", None)
        if not isinstance(visual, VisionTransformer):
            kind = type(visual).__name__ if visual is not None else "no image tower"
            raise InputError(f"{name}: CDS needs a ViT image tower with patch tokens, got {kind}")
        if visual.attn_pool is not None:
            raise InputError(f"{name}: ViTs with an attentional pooler are not supported")
        square = visual.grid_size[0] == visual.grid_size[1]
        if not square or visual.patch_size[0] != visual.patch_size[1]:
            raise InputError(f"{name}: CDS needs a square patch grid, got {visual.grid_size}")
        self.model, self.visual, self.name, self.device = model, visual, name, device
        self.grid = int(visual.grid_size[0])
        self.patch_size = int(visual.patch_size[0])
        if self.grid * self.patch_size != visual.image_size[0]:
            raise InputError(
                f"{name}: image size {visual.image_size[0]} is not a whole number of "
                f"{self.patch_size}-pixel patches"
            )
        self.width = int(visual.conv1.out_channels)
        self.n_layers = len(visual.transformer.resblocks)
        self.embed_dim = int(visual.proj.shape[1]) if visual.proj is not None else self.width
        self.dtype = visual.conv1.weight.dtype
        mean, std = _normalisation(model)
        self._mean = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        self._std = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)

    @classmethod
    def from_encoder(cls, encoder: Any) -> OpenClipPatches:
        """The image tower of an encoder from `training.core.encoders.load_encoder`."""
        model = getattr(encoder, "model", None)
        if getattr(encoder, "spec", None) is None or encoder.spec.family != "open_clip":
            raise InputError(f"CDS needs an open_clip ViT encoder, got {encoder.id}")
        if getattr(model, "visual", None) is None:
            raise InputError(f"encoder {encoder.id} has no image tower")
        return cls(model, encoder.id, encoder.device)

    def pixels(self, images: Sequence[Any]) -> torch.Tensor:
        batch = self.crop_tensor(images)
        return ((batch - self._mean) / self._std).to(self.device, self.dtype)

    @torch.no_grad()
    def forward(self, pixels: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        visual = self.visual
        x = visual._embeds(pixels)
        transformer = visual.transformer
        if not transformer.batch_first:
            x = x.transpose(0, 1)
        for block in transformer.resblocks[:layer]:
            x = block(x, attn_mask=None)
        if not transformer.batch_first:
            x = x.transpose(0, 1)
        tokens = x[:, 1:]
        joint = visual.ln_post(tokens)
        if visual.proj is not None:
            joint = joint @ visual.proj
        joint = torch.nn.functional.normalize(joint.float(), dim=-1)
        return tokens.float(), joint


def _normalisation(model: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The model's pixel mean and std (open_clip's preprocess config, else OpenAI's)."""
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
    from open_clip.model import get_model_preprocess_cfg

    try:
        config = get_model_preprocess_cfg(model)
    except AttributeError:
        config = {}
    mean = tuple(config.get("mean") or OPENAI_DATASET_MEAN)
    std = tuple(config.get("std") or OPENAI_DATASET_STD)
    return mean, std


# -- features --------------------------------------------------------------------------------
@dataclass
class FeatureSet:
    """Sparse features read off a patch model: ids, names, what they read, how.

    `source` is "joint" (per-patch joint embeddings) or "tokens" (patch tokens); `activate`
    maps rows [N, dim] of that source to non-negative activations [N, F]. `kinds` is the ground
    truth where it is known by construction (local / context / register, see
    `training.cds.constructed`), else None.
    """

    kind: str
    ids: list[str]
    names: list[str | None]
    source: str
    activate: Callable[[torch.Tensor], torch.Tensor]
    kinds: list[str] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def activations(self, tokens: torch.Tensor, joint: torch.Tensor) -> torch.Tensor:
        """[B, P, F] ≥ 0 for one batch of crops (computed on the CPU, in float32)."""
        rows = joint if self.source == "joint" else tokens
        batch, patches, dim = rows.shape
        acts = self.activate(rows.reshape(batch * patches, dim).float().cpu())
        return acts.clamp_min(0.0).reshape(batch, patches, -1)


def concept_activations(
    rows: torch.Tensor, rotation: torch.Tensor, mean: torch.Tensor
) -> torch.Tensor:
    """[N, 2D]: z = (x − b)Uᵀ; column 2j = max(z_j, 0) (+j), column 2j + 1 = max(−z_j, 0) (−j)."""
    z = (rows - mean) @ rotation.T
    return torch.stack([z.clamp_min(0.0), (-z).clamp_min(0.0)], dim=-1).reshape(len(rows), -1)


def concept_features(artifact: Any, embed_dim: int) -> FeatureSet:
    """The 2D signed concepts of a CEDAR artifact, named from its catalog."""
    from training.cedar.sparse_codes import concept_label

    if artifact.method != "cedar":
        raise InputError(f"--artifact must be a CEDAR artifact, got method {artifact.method!r}")
    if artifact.dim != embed_dim:
        raise InputError(
            f"the artifact is {artifact.dim}-d but the image tower's joint space is {embed_dim}-d"
        )
    catalog = artifact.extra.get("catalog")
    if not isinstance(catalog, list) or len(catalog) != 2 * artifact.dim:
        raise InputError(
            f"the CEDAR artifact lacks a complete concept catalog ({2 * artifact.dim} entries)"
        )
    rotation = torch.from_numpy(np.asarray(artifact.rotation, dtype=np.float32))
    mean = torch.from_numpy(np.asarray(artifact.mean, dtype=np.float32))
    names = [entry.get("name") if isinstance(entry, dict) else None for entry in catalog]
    return FeatureSet(
        kind="cedar",
        ids=[concept_label(c) for c in range(2 * artifact.dim)],
        names=[str(n) if n is not None else None for n in names],
        source="joint",
        activate=lambda rows: concept_activations(rows, rotation, mean),
    )


def sae_activations(sae: Any, rows: torch.Tensor, k: int) -> torch.Tensor:
    """[N, M]: the SAE's codes with the k largest kept per row (`SparseAutoencoder.encode`)."""
    with torch.no_grad():
        return sae.encode(rows.to(sae.w_dec.device), k).cpu()


def sae_features(sae: Any, k: int) -> FeatureSet:
    """The M latents of an SAE trained on patch tokens."""
    return FeatureSet(
        kind="sae",
        ids=[f"latent-{i}" for i in range(sae.n_latents)],
        names=[None] * sae.n_latents,
        source="tokens",
        activate=lambda rows: sae_activations(sae, rows, k),
    )


def channel_features(width: int, kinds: Sequence[str] | None = None) -> FeatureSet:
    """The token channels themselves, max(t_j, 0), with their ground-truth kinds if known."""
    ids = [f"{kinds[j]}-{j}" if kinds else f"channel-{j}" for j in range(width)]
    return FeatureSet(
        kind="channel",
        ids=ids,
        names=[None] * width,
        source="tokens",
        activate=lambda rows: rows.clamp_min(0.0),
        kinds=list(kinds) if kinds else None,
    )
