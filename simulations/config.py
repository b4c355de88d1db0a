"""`SimulationConfig`: one typed object for a simulation run, from a scenario TOML plus flags.

Flags override the scenario file, which overrides the defaults below. The README's
"Simulation settings" table documents every field.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError
from fedort.common.tomlfile import read_table, unknown_settings
from fedort.coordinator.fedbuff.config import FedBuffSettings
from fedort.coordinator.privacy.config import PRIVACY_KEYS, PrivacySettings

BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class SimulationConfig:
    """A simulation run; its `privacy` and `fedbuff` sections are the coordinator's own section types
    (same keys, same defaults, same checks), handed to the simulated coordinator as they are."""

    name: str | None = None  # label of logs, summary, plot (default: digits, synthetic, or the --data folder name)
    clients: int = 10
    clients_per_round: int | None = None  # exact count per round; overrides fraction
    fraction: float = 1.0
    rounds: int = 30
    partition: str = "dirichlet:0.5"  # digits only: synthetic data comes partitioned
    min_partition_size: int = 1  # dirichlet: every client gets at least this many examples
    dataset: str = "digits"  # "digits" | "synthetic:ALPHA,BETA" (simulations.synthetic)
    model: str | None = None  # built-in model (default: mlp for digits, logreg for synthetic)
    optimizer: str = "adamw"
    artifacts: Path | None = None  # the user's own artifacts folder
    data: Path | None = None  # the user's own data: client-*.npz + test.npz
    local_epochs: int = 1
    batch_size: int = 16  # 0 = the client's whole data set (FedSGD)
    lr: float = 0.01
    reset_optimizer: bool = True
    prox_mu: float = 0.0  # FedProx proximal weight (needs optimizer "sgd"); 0 = FedAvg
    backend: str = "local"
    ray_address: str | None = None
    workers: int = 0  # 0 = one per core, at most one per selected client
    seed: int = 0
    test_fraction: float = 0.2
    round_timeout_s: float = 300.0
    target_accuracy: float | None = None
    strategy: str = "fedavg"  # coordinator aggregation (coordinator.aggregation)
    server_optimizer: str = "fedavg"  # server update (coordinator.server_optimizers)
    byzantine_fraction: float = 0.0  # share of clients that attack (seeded choice)
    attack: str = "sign-flip"  # what they do (simulations.attacks)
    straggler_fraction: float = 0.0  # share of clients (seeded choice) doing partial work
    straggler_steps: int = 1  # ... at most this many local optimizer steps per round
    codec: str = "raw"  # update codec of every virtual client (protos/codecs); the coordinator allows it
    topk_warmup: str = "3x45"  # top-k sparsity warm-up FACTORxROUNDS | off (edge_client/uploads/topk_warmup.py)
    export_every: int = 1  # inference model every N rounds and after the last (0: last only)
    state_dir: Path | None = None  # coordinator state elsewhere (e.g. tmpfs: /dev/shm/...); default OUT/state
    local_vectors: bool = True  # vectors as files in the state dir, not gRPC streams (clients on this host)
    device_speed: str = "uniform"  # simulated compute speed per client (simulations.device_speed)
    step_seconds: float = 0.01  # simulated seconds per local step at speed factor 1
    progress: bool = True
    out: Path = field(default_factory=lambda: Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    fedbuff: FedBuffSettings = field(default_factory=FedBuffSettings)

    def __post_init__(self) -> None:
        problems = []
        if self.dataset != "digits":
            try:
                from fedort.simulations.data.synthetic import parse_synthetic

                parse_synthetic(self.dataset)
            except ConfigError as e:
                problems.append(f"dataset must be digits or synthetic:ALPHA,BETA: {e}")
        if self.model is None:  # frozen dataclass: settle the default once, here
            object.__setattr__(self, "model", "logreg" if self.is_synthetic else "mlp")
        if self.name is None:
            label = Path(self.data).name if self.data is not None else "synthetic" if self.is_synthetic else "digits"
            object.__setattr__(self, "name", label)
        if self.artifacts is None and self.is_synthetic != (self.model == "logreg"):
            problems.append(
                f"model {self.model!r} does not fit dataset {self.dataset!r}: synthetic data has 60 "
                f"features (model logreg), digits 64 (mlp or cnn)"
            )
        if self.clients < 1:
            problems.append(f"clients must be >= 1, got {self.clients}")
        if self.clients_per_round is not None and not 1 <= self.clients_per_round <= self.clients:
            problems.append(f"clients_per_round must be in 1..{self.clients}, got {self.clients_per_round}")
        if not 0 < self.fraction <= 1:
            problems.append(f"fraction must be in (0, 1], got {self.fraction}")
        if not (
            isinstance(self.min_partition_size, int)
            and not isinstance(self.min_partition_size, bool)
            and self.min_partition_size >= 1
        ):
            problems.append(f"min_partition_size must be an integer >= 1, got {self.min_partition_size!r}")
        if self.rounds < 1:
            problems.append(f"rounds must be >= 1, got {self.rounds}")
        if self.local_epochs < 1:
            problems.append(f"local_epochs must be >= 1, got {self.local_epochs}")
        if self.batch_size < 0:
            problems.append(f"batch_size must be >= 0 (0 = full batch), got {self.batch_size}")
        if not self.lr > 0:
            problems.append(f"lr must be > 0, got {self.lr}")
        if not (isinstance(self.prox_mu, (int, float)) and 0 <= self.prox_mu < float("inf")):
            problems.append(f"prox_mu must be a finite number >= 0, got {self.prox_mu!r}")
        elif self.prox_mu > 0 and self.artifacts is None and self.optimizer != "sgd":
            problems.append(
                f'prox_mu {self.prox_mu:g} (FedProx) needs optimizer = "sgd" (the proximal step is exact '
                f"only for SGD), got {self.optimizer!r}"
            )
        if self.backend not in BACKENDS:
            problems.append(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if (self.artifacts is None) != (self.data is None):
            problems.append("--artifacts and --data go together (your own model needs your own data)")
        if not (
            isinstance(self.export_every, int) and not isinstance(self.export_every, bool) and self.export_every >= 0
        ):
            problems.append(
                f"export_every must be an integer >= 0 (0: the final model only), got {self.export_every!r}"
            )
        if self.workers < 0:
            problems.append(f"workers must be >= 0, got {self.workers}")
        if not (isinstance(self.straggler_fraction, (int, float)) and 0 <= self.straggler_fraction <= 1):
            problems.append(f"straggler_fraction must be in [0, 1], got {self.straggler_fraction!r}")
        if not (isinstance(self.straggler_steps, int) and self.straggler_steps >= 1):
            problems.append(f"straggler_steps must be an integer >= 1, got {self.straggler_steps!r}")
        if not (isinstance(self.byzantine_fraction, (int, float)) and 0 <= self.byzantine_fraction < 1):
            problems.append(f"byzantine_fraction must be in [0, 1), got {self.byzantine_fraction!r}")
        buffer_size = self.fedbuff.buffer_size
        if self.fedbuff.is_async and not buffer_size <= self.clients:
            problems.append(
                f"buffer_size must be an integer in 1..clients ({self.clients}): each client adds at most "
                f"one update to a version's buffer, got {buffer_size!r}"
            )
        if not (isinstance(self.step_seconds, (int, float)) and self.step_seconds > 0):
            problems.append(f"step_seconds must be > 0, got {self.step_seconds!r}")
        for check, value in (
            (_check_strategy, self.strategy),
            (_check_server_optimizer, self.server_optimizer),
            (_check_attack, self.attack),
            (_check_codec, self.codec),
            (_check_warmup, self.topk_warmup),
            (_check_device_speed, self.device_speed),
        ):
            try:
                check(value)
            except ConfigError as e:
                problems.append(str(e))
        problems += _privacy_conflicts(self)
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def is_synthetic(self) -> bool:
        return self.dataset.startswith("synthetic")

    @property
    def per_round(self) -> int:
        """How many clients train in each round."""
        if self.clients_per_round is not None:
            return self.clients_per_round
        return max(1, min(self.clients, round(self.fraction * self.clients)))

    @property
    def virtual_clock(self) -> bool:
        """Device speeds are simulated: one worker serves every client on one virtual clock."""
        return self.device_speed.strip().lower() != "uniform"

    @property
    def worker_count(self) -> int:
        if self.virtual_clock:
            return 1
        wanted = self.workers or (os.cpu_count() or 1)
        return max(1, min(wanted, self.clients if self.fedbuff.is_async else self.per_round, self.clients))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SimulationConfig:
        """From flat keys (the sections' keys among them) and/or `privacy` / `fedbuff` tables."""
        own: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        for key, value in values.items():
            if key in SECTIONS and isinstance(value, Mapping):
                sections[key].update(value)
            elif key in _SECTION_OF:
                sections[_SECTION_OF[key]][key] = value
            else:
                own[key] = value
        try:
            built = {name: kind(**sections[name]) for name, kind in SECTIONS.items()}
            return cls(**own, **built)
        except TypeError as e:
            raise ConfigError(f"bad simulation settings: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-able values (the sections' keys beside the others: every key is unique)."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in SECTIONS}
        for name in SECTIONS:
            flat.update(dataclasses.asdict(getattr(self, name)))
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in flat.items()}


def _check_strategy(spec: str) -> None:
    from fedort.coordinator.aggregation import parse_strategy

    parse_strategy(spec)


def _check_warmup(spec: str) -> None:
    from fedort.edge_client.uploads.topk_warmup import TopkWarmup

    TopkWarmup.parse(spec)  # ConfigError names the expected form


def _check_codec(spec: str) -> None:
    from fedort.common.errors import VectorError
    from fedort.protos.update_codecs import parse_codec

    try:
        parse_codec(spec)
    except VectorError as e:
        raise ConfigError(f"codec: {e}") from None


def _check_server_optimizer(spec: str) -> None:
    from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer

    parse_server_optimizer(spec)


def _check_device_speed(spec: str) -> None:
    from fedort.simulations.device_speed import parse_device_speed

    parse_device_speed(spec)


def _privacy_conflicts(cfg: SimulationConfig) -> list[str]:
    from fedort.coordinator.privacy.config import privacy_conflicts

    return privacy_conflicts(cfg.privacy, cfg.strategy)


def _check_attack(spec: str) -> None:
    from fedort.simulations.attacks import parse_attack

    parse_attack(spec)


SECTIONS: dict[str, type] = {"privacy": PrivacySettings, "fedbuff": FedBuffSettings}
_SECTION_OF = {
    **{k: "privacy" for k in PRIVACY_KEYS},
    **{f.name: "fedbuff" for f in dataclasses.fields(FedBuffSettings)},
}
_FIELDS = {f.name: f for f in dataclasses.fields(SimulationConfig) if f.name not in SECTIONS}
_PATHS = {"artifacts", "data", "out", "state_dir"}


def load_config(
    scenario: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None
) -> SimulationConfig:
    """Defaults <- scenario TOML <- overrides (None values in overrides are ignored)."""
    values: dict[str, Any] = {}
    if scenario is not None:
        from fedort.simulations.bundled_scenarios import bundled, resolve

        path = resolve(scenario)
        if not path.exists():
            raise ConfigError(
                f"scenario {str(scenario)!r} is neither a file nor a bundled scenario; bundled: "
                f"{', '.join(bundled())} (fedort simulate --list)"
            )
        values.update(read_table(path, None))
        unknown = sorted(set(values) - set(_FIELDS) - set(_SECTION_OF) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"{path}: " + unknown_settings("simulation", unknown, [*_FIELDS, *_SECTION_OF]))
        base = path.parent
        for key in _PATHS & set(values):
            values[key] = (base / values[key]) if key != "out" else Path(values[key])
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "fraction" in given and "clients_per_round" not in given:
        values.pop("clients_per_round", None)  # --fraction on the command line beats the file's count
    values.update(given)
    for key in _PATHS & set(values):
        values[key] = Path(values[key])
    return SimulationConfig.from_mapping(values)
