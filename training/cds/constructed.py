"""A small ViT-like model whose features are local or global by construction, and test images.

`ConstructedViT` (plain torch, deterministic from its seed, one "layer") cuts a p·n-pixel image
into a p × p grid of n × n patches, like a ViT's patch embedding, and builds every patch token
t_i ∈ R^W from three groups of channels, the ground truth CDS must recover:

- **local** (kind "local"): ℓ_k(i) = max(0, w_k · x_i + c_k + β·π_k(i)), with x_i patch i's
  normalised pixels, w_k a fixed unit filter. With β = 0 (the default) a function of the
  patch's own pixels only: the same on the shared patches of both crops, CDS = 0.
- **context** (kind "context"): g = (mean colour of the crop, mean of each local channel over
  the crop) summarises the whole input; channel k is
      γ_k(i) = softplus(v_k · g + d_k) · ((1 − α_k) · bump_k(i) + α_k · ℓ_{π(k)}(i) / max ℓ_{π(k)})
  + β·π(i), where bump_k is a Gaussian fixed on the grid (centre μ_k, width σ_k) and
  α_k ∈ [0, content_mix] mixes in a content-following local map. Its magnitude depends on the
  whole image, and its shape is pinned to the grid, so when the crop moves the map stays put
  relative to the grid and moves relative to the pixels: CDS > 0.
- **register** (kind "register"): one token at a fixed grid position r = (p // 2, p // 2)
  absorbs the global summary, ρ_k(r) = register_norm · softplus(u_k · g + e_k), and is 0
  elsewhere. That token's norm is far above every other (a register-like high-norm outlier
  token, Darcet et al. 2024); the feature lives only on it, which sits on shared patch
  (r − s, r − s) of crop A and (r, r) of crop B: EMD = s·√2, CDS = s / (p − s − 1), outlier
  share 1.

β (`position_strength`) adds a smooth positional embedding π to every channel before its
non-linearity, as a ViT adds one to every token; β > 0 makes the local channels slightly
position dependent (a harder test). The joint-space embedding of patch i is normalise(P t_i)
with a fixed random projection P, so CEDAR artifacts and SAEs can be scored on this model too.

`synthetic_images` draws natural-ish RGB images (sky/ground gradients, 1/f noise, shapes with
textures), so tests need no data files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from training.cds.patches import FeatureSet, PatchModel, channel_features

KINDS = ("local", "context", "register")


class ConstructedViT(PatchModel):
    """See the module docstring. Channels: n_local local, n_context context, n_register
    register, in that order."""

    def __init__(
        self,
        grid: int = 8,
        patch: int = 8,
        n_local: int = 24,
        n_context: int = 16,
        n_register: int = 8,
        embed_dim: int = 32,
        register_norm: float = 10.0,
        position_strength: float = 0.0,
        content_mix: float = 0.5,
        seed: int = 0,
    ) -> None:
        if grid < 4 or patch < 1 or min(n_local, n_context, n_register) < 0:
            raise ValueError("the constructed model needs grid >= 4, patch >= 1, counts >= 0")
        self.name = f"constructed(p={grid}, n={patch}, seed={seed})"
        self.grid, self.patch_size, self.n_layers, self.device = grid, patch, 1, "cpu"
        self.n_local, self.n_context, self.n_register = n_local, n_context, n_register
        self.width = n_local + n_context + n_register
        self.embed_dim = embed_dim
        self.register_norm = register_norm
        self.register_position = (grid // 2) * grid + grid // 2
        generator = torch.Generator().manual_seed(seed)

        def normal(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=generator)

        def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(*shape, generator=generator)

        filters = normal(n_local, 3 * patch * patch)
        self.local_filters = filters / filters.norm(dim=1, keepdim=True)
        self.local_bias = 0.2 * normal(n_local)
        summary = 3 + n_local
        self.context_weights = normal(n_context, summary) / math.sqrt(summary)
        self.context_bias = normal(n_context)
        index = torch.arange(grid * grid)
        rows, cols = (index // grid).float(), (index % grid).float()
        centres = uniform(1.0, grid - 2.0, n_context, 2)
        sigmas = uniform(0.8, 2.0, n_context, 1)
        distance2 = (rows[None] - centres[:, :1]) ** 2 + (cols[None] - centres[:, 1:]) ** 2
        self.bumps = torch.exp(-distance2 / (2 * sigmas**2))  # [n_context, P], peak ≈ 1
        self.context_mix = uniform(0.0, content_mix, n_context)
        self.context_partner = torch.randint(0, max(1, n_local), (n_context,), generator=generator)
        self.register_weights = normal(n_register, summary) / math.sqrt(summary)
        self.register_bias = normal(n_register)
        frequencies = uniform(0.2, 1.2, self.width, 2, 2)
        phases = uniform(0.0, 2 * math.pi, self.width, 2)
        waves = torch.cos(
            2
            * math.pi
            * (
                frequencies[..., 0] * rows.view(-1, 1, 1)
                + frequencies[..., 1] * cols.view(-1, 1, 1)
            )
            / grid
            + phases
        )
        self.position = position_strength * waves.sum(dim=-1) / math.sqrt(2)  # [P, W]
        self.projection = normal(self.width, embed_dim) / math.sqrt(self.width)

    @property
    def kinds(self) -> list[str]:
        """The ground-truth kind of each channel."""
        return (
            ["local"] * self.n_local
            + ["context"] * self.n_context
            + ["register"] * (self.n_register)
        )

    def features(self) -> FeatureSet:
        """The token channels as features, with their kinds as ground truth."""
        return channel_features(self.width, self.kinds)

    def pixels(self, images: Sequence[Any]) -> torch.Tensor:
        return (self.crop_tensor(images) - 0.5) / 0.25

    @torch.no_grad()
    def forward(self, pixels: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        n, p = self.patch_size, self.grid
        batch = pixels.shape[0]
        patches = (
            pixels.reshape(batch, 3, p, n, p, n).permute(0, 2, 4, 1, 3, 5).reshape(batch, p * p, -1)
        )
        position = self.position
        nl, nc = self.n_local, self.n_context
        local = torch.relu(patches @ self.local_filters.T + self.local_bias + position[:, :nl])
        summary = torch.cat([pixels.mean(dim=(2, 3)), local.mean(dim=1)], dim=1)  # [B, 3 + nl]

        softplus = torch.nn.functional.softplus
        strength = softplus(summary @ self.context_weights.T + self.context_bias)
        if nl:
            partner = local[:, :, self.context_partner]  # [B, P, nc]
            partner = partner / partner.amax(dim=1, keepdim=True).clamp_min(1e-6)
        else:
            partner = torch.zeros(batch, p * p, nc)
        mix = self.context_mix
        shape = (1 - mix) * self.bumps.T[None] + mix * partner
        context = torch.relu(strength[:, None, :] * shape + position[:, nl : nl + nc])

        register = torch.zeros(batch, p * p, self.n_register)
        value = softplus(summary @ self.register_weights.T + self.register_bias)
        register[:, self.register_position] = self.register_norm * value
        tokens = torch.cat([local, context, register], dim=2)
        joint = torch.nn.functional.normalize(tokens @ self.projection, dim=-1)
        return tokens, joint


def synthetic_images(count: int, size: int = 128, seed: int = 0) -> list[Any]:
    """`count` natural-ish RGB PIL images of size × size, deterministic from `seed`.

    Each is a two-colour vertical gradient (sky and ground), a few ellipses, rectangles and
    polygons of random colours (some striped), and 1/f (pink) noise over everything, so that
    patches differ in colour, edges and texture the way photographs do.
    """
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    frequency = np.sqrt(np.fft.fftfreq(size)[:, None] ** 2 + np.fft.fftfreq(size)[None] ** 2)
    frequency[0, 0] = 1.0
    images = []
    for _ in range(count):
        top, bottom = rng.uniform(0, 1, 3), rng.uniform(0, 1, 3)
        horizon = rng.uniform(0.3, 0.7)
        blend = 1 / (1 + np.exp(-(yy - horizon) * rng.uniform(5, 30)))
        base = top[None, None] * (1 - blend[..., None]) + bottom[None, None] * blend[..., None]
        image = Image.fromarray((base * 255).astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(3, 8))):
            colour = tuple(int(c) for c in rng.integers(0, 256, 3))
            x0, y0 = rng.uniform(-0.1, 0.9, 2) * size
            w, h = rng.uniform(0.08, 0.5, 2) * size
            box = [float(x0), float(y0), float(x0 + w), float(y0 + h)]
            shape = rng.integers(0, 3)
            if shape == 0:
                draw.ellipse(box, fill=colour)
            elif shape == 1:
                draw.rectangle(box, fill=colour)
            else:
                points = [tuple(float(v) for v in rng.uniform(0, 1, 2) * size) for _ in range(3)]
                draw.polygon(points, fill=colour)
            if rng.uniform() < 0.4:  # stripes over the shape's box
                step = int(rng.integers(3, 9))
                dark = tuple(max(0, c - 80) for c in colour)
                for offset in range(int(box[0]), int(box[2]), 2 * step):
                    draw.line([(offset, box[1]), (offset, box[3])], fill=dark, width=step // 2 + 1)
        pixels = np.asarray(image, dtype=np.float64) / 255
        noise = np.real(
            np.fft.ifft2(np.fft.fft2(rng.normal(size=(3, size, size))) / frequency**1.2)
        )
        noise = noise / noise.std(axis=(1, 2), keepdims=True) * rng.uniform(0.03, 0.1)
        pixels = np.clip(pixels + np.moveaxis(noise, 0, -1) + 0.02 * xx[..., None], 0, 1)
        images.append(Image.fromarray((pixels * 255).astype(np.uint8)))
    return images
