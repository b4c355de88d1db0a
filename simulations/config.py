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
from fedort.common.settings.options import option
from fedort.common.settings.tomlfile import read_table, unknown_settings
from fedort.coordinator.fedbuff.config import FedBuffSettings
from fedort.coordinator.privacy.config import PRIVACY_KEYS, PrivacySettings

BACKENDS = ("local", "ray")
# the --help groups of the simulation's own keys (its privacy and fedbuff sections have their own)
RUN, DATA, TRAIN = "the run", "data", "model, training and aggregation"
CLIENTS, WHERE, OUTPUT = "the clients' behaviour", "where the clients run", "output"
GROUPS = (RUN, DATA, TRAIN, CLIENTS, WHERE, OUTPUT)


@dataclass(frozen=True)
class SimulationConfig:
    """A simulation run; its `privacy` and `fedbuff` sections are the coordinator's own section types
    (same keys, same defaults, same checks), handed to the simulated coordinator as they are."""

    name: str | None = option(
        None,
        "label of the logs, summary and plot",
        metavar="NAME",
        doc_default="digits, synthetic or the --data folder's name",
        group=RUN,
    )
    clients: int = option(10, "virtual clients", group=RUN)
    clients_per_round: int | None = option(
        None, "clients selected each round, a count (beats fraction)", metavar="M", doc_default="all", group=RUN
    )
    fraction: float = option(1.0, "share of the clients selected each round", metavar="F", group=RUN)
    rounds: int = option(30, "federated rounds (async mode: global versions)", group=RUN)
    round_timeout_s: float = option(
        300.0, "round deadline in seconds (the cohort trains in turn on this machine's cores)", metavar="S", group=RUN
    )
    seed: int = option(
        0, "seeds partitions, selection and shuffling: the same seed gives the same final vector", group=RUN
    )
    target_accuracy: float | None = option(
        None,
        "accuracy the summary and plot mark (and sim_seconds_to_target on a virtual clock)",
        metavar="A",
        group=RUN,
    )
    dataset: str = option(
        "digits",
        "digits, or synthetic:ALPHA,BETA (the FedProx paper's Synthetic; model logreg)",
        metavar="SPEC",
        group=DATA,
    )
    partition: str = option(
        "dirichlet:0.5",
        "digits: iid | dirichlet:ALPHA (label skew) | shards:K (K label shards per client)",
        metavar="SPEC",
        group=DATA,
    )
    min_partition_size: int = option(
        1,
        "dirichlet: every client gets at least K examples; short draws are redrawn (up to 100), then the closest "
        "is topped up from other clients' surplus; an error only when clients x K > examples",
        metavar="K",
        group=DATA,
    )
    test_fraction: float = option(0.2, "digits: share held out as test.npz, stratified", metavar="F", group=DATA)
    data: Path | None = option(
        None, "your own data: a folder of client-NNNN.npz + test.npz (with --artifacts)", metavar="DIR", group=DATA
    )
    model: str | None = option(
        None,
        "built-in model: mlp or cnn (digits), logreg (synthetic); unless --artifacts and --data are given",
        choices=("mlp", "cnn", "logreg"),
        doc_default="mlp, logreg for synthetic",
        group=TRAIN,
    )
    optimizer: str = option("adamw", "the built-in model's optimizer", choices=("adamw", "sgd"), group=TRAIN)
    artifacts: Path | None = option(
        None, "your own artifacts folder (fedort artifacts build); needs --data", metavar="DIR", group=TRAIN
    )
    local_epochs: int = option(1, "local epochs per round", metavar="E", group=TRAIN)
    batch_size: int = option(16, "local batch size; 0: the client's whole data (FedSGD)", metavar="B", group=TRAIN)
    lr: float = option(0.01, "the clients' learning rate", metavar="LR", group=TRAIN)
    reset_optimizer: bool = option(True, "clients start each round with fresh optimizer state", group=TRAIN)
    prox_mu: float = option(
        0.0,
        "FedProx: clients add MU/2 * ||w - w_global||^2 to their loss; needs --optimizer sgd",
        metavar="MU",
        group=TRAIN,
    )
    strategy: str = option(
        "fedavg",
        "the coordinator's aggregation: fedavg | clip:NORM | median | trimmed-mean:BETA | krum:F | multi-krum:F:M",
        metavar="SPEC",
        group=TRAIN,
    )
    server_optimizer: str = option(
        "fedavg",
        "the coordinator's server update: fedavg | fedavgm | fedadagrad | fedadam | fedyogi, options as "
        "NAME:KEY=VALUE,...",
        metavar="SPEC",
        group=TRAIN,
    )
    byzantine_fraction: float = option(
        0.0, "share of clients (chosen by seed) that upload a corrupted update instead", metavar="F", group=CLIENTS
    )
    attack: str = option(
        "sign-flip",
        "what they upload: sign-flip[:K] = g - K(v - g), K = 4; scale:K = g + K(v - g)",
        metavar="SPEC",
        group=CLIENTS,
    )
    straggler_fraction: float = option(
        0.0, "share of clients (chosen by seed) doing partial work each round", metavar="F", group=CLIENTS
    )
    straggler_steps: int = option(1, "local optimizer steps a straggler stops after", group=CLIENTS)
    codec: str = option(
        "raw",
        "the clients' update codec: raw, fp16, bf16, int8[:B], topk:F (error feedback), zstd+ any of them; the "
        "run's coordinator allows it",
        metavar="SPEC",
        group=CLIENTS,
    )
    topk_warmup: str = option(
        "3x45", "top-k warm-up: FACTOR x F in round 1 decaying to F by round R, or off", metavar="FxR", group=CLIENTS
    )
    device_speed: str = option(
        "uniform",
        "simulated compute speed per client: uniform | lognormal:SIGMA | slow:F:K; anything but uniform runs "
        "every client on one virtual clock",
        metavar="SPEC",
        group=CLIENTS,
    )
    step_seconds: float = option(0.01, "simulated seconds of one local step at speed 1", metavar="S", group=CLIENTS)
    backend: str = option("local", "where clients run: local processes or Ray", choices=BACKENDS, group=WHERE)
    ray_address: str | None = option(
        None, "an existing Ray cluster", metavar="ADDRESS", doc_default="a local Ray instance", group=WHERE
    )
    workers: int = option(0, "worker processes, each hosting many clients (0: one per core)", group=WHERE)
    local_vectors: bool = option(
        True,
        "clients on this host pass vectors as files in the state dir; --no-local-vectors streams every vector "
        "over gRPC as a deployed device does (same checks, same bits)",
        group=WHERE,
    )
    state_dir: Path | None = option(
        None,
        "keep the coordinator state in DIR (e.g. tmpfs /dev/shm/run1: no disk fsyncs, lost at reboot)",
        metavar="DIR",
        doc_default="OUT/state",
        group=WHERE,
    )
    out: Path = option(
        help="run folder: report, plot, model and the coordinator state",
        metavar="DIR",
        doc_default="runs/<time>",
        default_factory=lambda: Path("runs") / time.strftime("%Y%m%d-%H%M%S"),
        group=OUTPUT,
    )
    export_every: int = option(
        1,
        "write the inference model every N rounds and after the last; 0: the final one only (other rounds keep "
        "their server eval in model.json)",
        group=OUTPUT,
    )
    progress: bool = option(True, "the progress bar", group=OUTPUT)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    fedbuff: FedBuffSettings = field(default_factory=FedBuffSettings)

    def __post_init__(self) -> None:
        from fedort.simulations.config_checks import problems

        if self.model is None:  # frozen dataclass: settle the defaults once, here
            object.__setattr__(self, "model", "logreg" if self.is_synthetic else "mlp")
        if self.name is None:
            label = Path(self.data).name if self.data is not None else "synthetic" if self.is_synthetic else "digits"
            object.__setattr__(self, "name", label)
        found = problems(self)
        if found:
            raise ConfigError("; ".join(found))

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
