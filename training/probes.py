"""Linear probes: how much of a labelled task a representation still carries.

LP (docs/reference/metrics.md#reconstruction): a multinomial logistic regression is fitted on the
original embeddings of a training split; its cross-entropy on held-out originals is the reference,
and its cross-entropy on the held-out reconstructions says what the reconstruction lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class LinearProbe:
    weight: np.ndarray  # [C, D]
    bias: np.ndarray  # [C]
    classes: list[str]

    def cross_entropy(self, x: np.ndarray, labels: np.ndarray) -> float:
        """Mean cross-entropy (nats) of the probe on rows x with integer labels."""
        logits = torch.as_tensor(np.asarray(x, np.float32) @ self.weight.T + self.bias)
        return float(torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels)).item())


def encode_labels(values: np.ndarray, classes: list[str] | None = None) -> tuple[np.ndarray, list]:
    """Integer labels for string values (classes sorted unless given; unknown values → -1)."""
    classes = classes if classes is not None else sorted(set(values.tolist()))
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index.get(v, -1) for v in values.tolist()], dtype=np.int64), classes


def fit_linear_probe(
    x: np.ndarray, labels: np.ndarray, classes: list[str], l2: float = 1e-4, steps: int = 200
) -> LinearProbe:
    """Full-batch L-BFGS on cross-entropy + l2·‖W‖²; deterministic (zero init)."""
    if len(x) != len(labels) or len(x) == 0:
        raise ValueError(f"need as many labels as rows (> 0), got {len(labels)} for {len(x)}")
    features = torch.as_tensor(np.asarray(x, np.float32))
    target = torch.as_tensor(labels)
    weight = torch.zeros(len(classes), features.shape[1], requires_grad=True)
    bias = torch.zeros(len(classes), requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [weight, bias], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = features @ weight.T + bias
        loss = torch.nn.functional.cross_entropy(logits, target) + l2 * weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return LinearProbe(weight.detach().numpy(), bias.detach().numpy(), classes)
