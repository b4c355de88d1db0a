"""Server optimizers: the stage that turns the combiner's output into the next global vector.

    opt = parse_server_optimizer("fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3")
    new_global = opt.apply(global_vector, combined)      # float32; opt.state() advances
    opt.save(path); opt.load(path, length=P)             # one atomic file; refuses another spec/length

| spec | update (Δ = global − combined) | options (default) |
| --- | --- | --- |
| `fedavg` | x ← c, bit for bit | none |
| `fedavgm` | m ← β·m + Δ; x ← x − η·m | `lr` (1.0), `momentum` (0.0) |
| `fedadagrad` | m ← β1·m + (1−β1)·Δ; v ← v + Δ²; x ← x − η·m/(√v+τ) | `lr` (0.1), `beta1` (0), `tau` (1e-3) |
| `fedadam` | as Adam: v ← β2·v + (1−β2)·Δ² | `lr` (0.1), `beta1` (0.9), `beta2` (0.99), `tau` (1e-3), `bias_correction` (flower \\| adam \\| none) |
| `fedyogi` | as Yogi: v ← v − (1−β2)·Δ²·sign(v − Δ²) | `lr` (0.01), `beta1` (0.9), `beta2` (0.99), `tau` (1e-3) |

Every default is that of Flower's current (Message API) strategy of the same name in
`flwr.serverapp.strategy` (FedAvgM, FedAdagrad, FedAdam, FedYogi), so a ported `FedAdam()` behaves
the same here. Ranges: lr > 0, 0 ≤ beta < 1, tau > 0 (all finite). `str(opt)` is the canonical spec (every
option spelled out), which the state file records. The modules' docstrings give the math and
how each matches Flower's implementation; `stage.py` plugs an optimizer into the aggregation
pipeline as its server-update stage (`configured_strategy`).
"""

from __future__ import annotations

from fedort.common.errors import ConfigError
from fedort.coordinator.aggregation.server_optimizers.base import ServerOptimizer
from fedort.coordinator.aggregation.server_optimizers.fedadagrad import FedAdagrad
from fedort.coordinator.aggregation.server_optimizers.fedadam import FedAdam
from fedort.coordinator.aggregation.server_optimizers.fedavg import FedAvg
from fedort.coordinator.aggregation.server_optimizers.fedavgm import FedAvgM
from fedort.coordinator.aggregation.server_optimizers.fedyogi import FedYogi

OPTIMIZERS: dict[str, type[ServerOptimizer]] = {
    cls.name: cls for cls in (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi)
}
SPECS = (
    "fedavg | fedavgm | fedadagrad | fedadam | fedyogi, options as NAME:KEY=VALUE,... "
    "(e.g. fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3)"
)


def parse_server_optimizer(spec: str) -> ServerOptimizer:
    """A fresh optimizer (step 0) for `NAME[:KEY=VALUE,...]`; ConfigError says what was expected."""
    if not isinstance(spec, str):
        raise ConfigError(f"server optimizer must be a string ({SPECS}), got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    cls = OPTIMIZERS.get(name)
    if cls is None:
        raise ConfigError(f"unknown server optimizer {name!r} in {spec!r}; expected one of {SPECS}")
    options = {o.key: o for o in cls.options}
    values: dict[str, object] = {}
    for item in rest.split(",") if rest.strip() else []:
        key, eq, text = item.partition("=")
        key = key.strip().lower()
        if not eq or not key or not text.strip():
            raise ConfigError(f"server optimizer {spec!r}: expected KEY=VALUE, got {item.strip()!r}")
        if key not in options:
            if not options:
                raise ConfigError(f"server optimizer {name!r} takes no options, got {key!r} in {spec!r}")
            raise ConfigError(f"server optimizer {name!r} has no option {key!r}; its options: {', '.join(options)}")
        if key in values:
            raise ConfigError(f"server optimizer {spec!r}: option {key!r} given twice")
        values[key] = options[key].read(text.strip(), spec)
    return cls(**values)


def canonical_spec(spec: str) -> str:
    """The canonical form of a spec (every option spelled out), e.g. to compare two specs."""
    return str(parse_server_optimizer(spec))


__all__ = [
    "ServerOptimizer",
    "FedAvg",
    "FedAvgM",
    "FedAdagrad",
    "FedAdam",
    "FedYogi",
    "OPTIMIZERS",
    "SPECS",
    "parse_server_optimizer",
    "canonical_spec",
]
