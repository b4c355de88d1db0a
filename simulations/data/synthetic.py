"""Synthetic(α, β): the FedProx paper's non-IID benchmark that needs no download.

Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020), after Shamir et al.
(2014). Every client k has its own logistic model and its own input distribution:

    u_k ~ N(0, α²),  B_k ~ N(0, β²)                    (one draw per client)
    W_k ~ N(u_k, 1)  in R^{60x10},   b_k ~ N(u_k, 1)  in R^10
    v_k ~ N(B_k, 1)  in R^60                           (the mean of the client's inputs)
    x   ~ N(v_k, Σ),  Σ diagonal, Σ_jj = j^(-1.2)      (j = 1..60)
    y   = argmax(softmax(W_kᵀ x + b_k))                (10 classes)

β controls how much the clients' inputs differ (v_k's common mean B_k). α only shifts every entry
of W_k and b_k by the same u_k, which adds the same amount to every class's logit, so the argmax
— the labels — and the inputs do not depend on α at all: with one seed, Synthetic(0, β) and
Synthetic(5, β) are the same data (tests/simulations/test_synthetic.py checks it). The clients' models still
differ through their N(0, 1) parts, so even Synthetic(0, 0) is strongly non-IID in labels and sizes.
This follows the paper's definition and code exactly; it is a property of that benchmark. As in the paper's
code, α and β are the standard deviations passed to the normal draws, and client sizes follow a
power law: ⌊lognormal(4, 2)⌋ + 50 examples. Each client keeps (1 - test_fraction) of its rows;
the rest of every client is pooled into one test set (the paper holds out 10 % per client).
Everything comes from one numpy generator seeded by `seed`: the same arguments give the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedort.common.errors import ConfigError
from fedort.simulations.data.datasets import Arrays

FEATURES = 60
CLASSES = 10


@dataclass(frozen=True)
class SyntheticSpec:
    """Synthetic(alpha, beta); `parse_synthetic("synthetic:1,1")` reads the command-line form."""

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        for name, v in (("alpha", self.alpha), ("beta", self.beta)):
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ConfigError(f"synthetic {name} must be a finite number >= 0, got {v!r}")

    def __str__(self) -> str:
        return f"synthetic:{self.alpha:g},{self.beta:g}"


def parse_synthetic(spec: str) -> SyntheticSpec:
    """`synthetic:A,B` -> SyntheticSpec(A, B)."""
    name, _, args = spec.partition(":")
    parts = args.split(",")
    if name != "synthetic" or len(parts) != 2:
        raise ConfigError(f"expected synthetic:ALPHA,BETA (e.g. synthetic:1,1), got {spec!r}")
    try:
        return SyntheticSpec(float(parts[0]), float(parts[1]))
    except ValueError:
        raise ConfigError(f"expected synthetic:ALPHA,BETA with two numbers, got {spec!r}") from None


def client_sizes(clients: int, rng: np.random.Generator) -> np.ndarray:
    """Power-law sizes, as in the paper's code: ⌊lognormal(4, 2)⌋ + 50."""
    return rng.lognormal(4, 2, clients).astype(np.int64) + 50


def generate(alpha: float, beta: float, clients: int, seed: int = 0) -> list[Arrays]:
    """Each client's arrays: `x` float32 [n_k, 60], `labels` int64 [n_k] in 0..9."""
    SyntheticSpec(alpha, beta)
    if clients < 1:
        raise ConfigError(f"clients must be >= 1, got {clients}")
    rng = np.random.default_rng(seed)
    sizes = client_sizes(clients, rng)
    u = rng.normal(0.0, alpha, clients)
    b_mean = rng.normal(0.0, beta, clients)
    sigma = np.arange(1, FEATURES + 1, dtype=np.float64) ** -1.2  # diagonal of Σ
    out = []
    for k in range(clients):
        w = rng.normal(u[k], 1.0, (FEATURES, CLASSES))
        b = rng.normal(u[k], 1.0, CLASSES)
        v = rng.normal(b_mean[k], 1.0, FEATURES)
        x = v + rng.standard_normal((int(sizes[k]), FEATURES)) * np.sqrt(sigma)
        labels = np.argmax(x @ w + b, axis=1)  # softmax is monotone: argmax of logits
        out.append({"x": x.astype(np.float32), "labels": labels.astype(np.int64)})
    return out


def synthetic_split(
    alpha: float, beta: float, clients: int, seed: int = 0, test_fraction: float = 0.1
) -> tuple[list[Arrays], Arrays]:
    """(per-client training arrays, pooled test arrays): each client's last `test_fraction` rows are test."""
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test fraction must be in [0, 1), got {test_fraction}")
    train, test = [], []
    for arrays in generate(alpha, beta, clients, seed):
        n = len(arrays["labels"])
        keep = n - int(round(n * test_fraction)) if n > 1 else n
        train.append({k: a[:keep] for k, a in arrays.items()})
        test.append({k: a[keep:] for k, a in arrays.items()})
    pooled = {k: np.concatenate([t[k] for t in test]) for k in ("x", "labels")}
    return train, pooled


__all__ = ["CLASSES", "FEATURES", "SyntheticSpec", "client_sizes", "generate", "parse_synthetic", "synthetic_split"]
