"""The round-side sections of a coordinator config: the plan, the clients' recipe, aggregation, export."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedort.common.settings.options import as_path, is_int, is_number, need, option
from fedort.coordinator.export.external_data import EXTERNAL_MIN_BYTES


@dataclass(frozen=True)
class PlanSettings:
    """How many rounds, which clients take part, and how long each step may take."""

    rounds: int = option(3, "federated rounds (async mode: global versions to commit)")
    min_clients: int = option(2, "updates a round needs to close at its deadline", metavar="K")
    min_available_clients: int | None = option(
        None, "available clients before a round starts", metavar="K", doc_default="min_clients"
    )
    fraction: float = option(1.0, "share of available clients selected per round", metavar="F")
    round_timeout_s: float = option(60.0, "round deadline in seconds, per attempt", metavar="S")
    max_round_attempts: int = option(3, "attempts before a round (and the run) fails")
    seed: int = option(0, "seeds client selection and the clients' shuffling")
    fraction_evaluate: float = option(0.0, "share of clients asked to evaluate the final model", metavar="F")
    client_timeout_s: float = option(60.0, "a client unseen this long is not selected (0 disables)", metavar="S")
    heartbeat_interval_ms: int = option(10_000, "heartbeat interval told to clients at Join", metavar="MS")
    done_grace_s: float = option(
        10.0,
        "after the run ends (DONE or FAILED), keep answering up to this long so every device learns the "
        "outcome and exits at once; stops sooner once every available device has asked (0: stop at once)",
        metavar="S",
    )

    def __post_init__(self) -> None:
        if self.min_available_clients is None:
            object.__setattr__(self, "min_available_clients", self.min_clients)
        for name in ("rounds", "min_clients", "max_round_attempts", "heartbeat_interval_ms"):
            need(is_int(getattr(self, name), 1), f"{name} must be an integer >= 1", getattr(self, name))
        available = self.min_available_clients
        need(
            isinstance(available, int) and is_int(available) and available >= self.min_clients,
            f"min_available_clients must be an integer >= min_clients ({self.min_clients})",
            self.min_available_clients,
        )
        need(is_number(self.fraction) and 0 < self.fraction <= 1, "fraction must be in (0, 1]", self.fraction)
        need(
            is_number(self.fraction_evaluate) and 0 <= self.fraction_evaluate <= 1,
            "fraction_evaluate must be in [0, 1]",
            self.fraction_evaluate,
        )
        need(
            is_number(self.round_timeout_s) and self.round_timeout_s > 0,
            "round_timeout_s must be > 0",
            self.round_timeout_s,
        )
        need(
            is_number(self.done_grace_s) and self.done_grace_s >= 0,
            "done_grace_s must be >= 0 (0 stops at the end)",
            self.done_grace_s,
        )
        need(
            is_number(self.client_timeout_s) and self.client_timeout_s >= 0,
            "client_timeout_s must be >= 0 (0 disables)",
            self.client_timeout_s,
        )
        need(is_int(self.seed, 0), "seed must be an integer >= 0", self.seed)


@dataclass(frozen=True)
class TrainingSettings:
    """The clients' local training recipe, sent with every FIT task."""

    local_epochs: int = option(1, "clients' local epochs per round", metavar="E")
    batch_size: int = option(32, "clients' batch size; 0: each client's whole data set (FedSGD)", metavar="B")
    lr: float = option(0.05, "clients' learning rate", metavar="LR")
    reset_optimizer: bool = option(True, "clients start each round with fresh optimizer state")
    prox_mu: float = option(
        0.0, "FedProx: clients train f + MU/2 * ||w - w_global||^2; needs SGD artifacts (0: FedAvg)", metavar="MU"
    )

    def __post_init__(self) -> None:
        need(is_int(self.local_epochs, 1), "local_epochs must be an integer >= 1", self.local_epochs)
        need(
            is_int(self.batch_size, 0),
            "batch_size must be an integer >= 0 (0: each client's whole data set, i.e. FedSGD)",
            self.batch_size,
        )
        need(is_number(self.lr) and self.lr >= 0, "lr must be a finite number >= 0", self.lr)
        need(is_number(self.prox_mu) and self.prox_mu >= 0, "prox_mu must be a finite number >= 0", self.prox_mu)
        need(isinstance(self.reset_optimizer, bool), "reset_optimizer must be true or false", self.reset_optimizer)


@dataclass(frozen=True)
class AggregationSettings:
    """How a round's updates become the next global model (coordinator.aggregation)."""

    strategy: str = option(
        "fedavg",
        "aggregation: fedavg | clip:NORM | median | trimmed-mean:BETA | krum:F | multi-krum:F:M",
        metavar="SPEC",
    )
    server_optimizer: str = option(
        "fedavg",
        "server update after aggregation: fedavg | fedavgm | fedadagrad | fedadam | fedyogi, with options as "
        "NAME:KEY=VALUE,... e.g. fedadam:lr=0.01,tau=1e-3",
        metavar="SPEC",
    )

    def __post_init__(self) -> None:
        from fedort.coordinator.aggregation import parse_strategy
        from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer

        parse_strategy(self.strategy)  # raises ConfigError naming the accepted specs
        parse_server_optimizer(self.server_optimizer)  # likewise, and checks each option's range


@dataclass(frozen=True)
class ExportSettings:
    """What each committed round writes besides its global vector (coordinator.export)."""

    export_every: int = option(
        1,
        "write the inference model every N rounds and after the last; 0: after the last only (other rounds "
        "record only model.json with the server eval)",
    )
    export_external_bytes: int = option(
        EXTERNAL_MIN_BYTES,
        "a model whose trainable parameters take at least N bytes is exported as model.onnx + model.onnx.data "
        "(ONNX external data, a hard link to the round's global vector); smaller ones as one model.onnx; "
        "0: always external",
    )
    eval_data: Path | None = option(
        None, "held-out .npz evaluated on the server after each round (recorded in model.json)", metavar="FILE.npz"
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_data", as_path(self.eval_data))
        need(
            is_int(self.export_every, 0),
            "export_every must be an integer >= 0 (0: export after the last round only)",
            self.export_every,
        )
        need(
            is_int(self.export_external_bytes, 0),
            "export_external_bytes must be an integer >= 0 (0: always external data)",
            self.export_external_bytes,
        )
        need(
            self.eval_data is None or self.eval_data.suffix == ".npz", "eval_data must be an .npz file", self.eval_data
        )
