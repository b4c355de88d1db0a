"""The checks of a `SimulationConfig`'s own keys (its privacy and fedbuff sections check theirs): every
problem at once, each saying what was expected and what arrived."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedort.common.errors import ConfigError

if TYPE_CHECKING:
    from fedort.simulations.config import SimulationConfig


def problems(cfg: SimulationConfig) -> list[str]:
    """Every problem with `cfg`'s own settings, as messages (empty: none)."""
    from fedort.simulations.config import BACKENDS

    problems: list[str] = []
    if cfg.dataset != "digits":
        try:
            from fedort.simulations.data.synthetic import parse_synthetic

            parse_synthetic(cfg.dataset)
        except ConfigError as e:
            problems.append(f"dataset must be digits or synthetic:ALPHA,BETA: {e}")
    if cfg.artifacts is None and cfg.is_synthetic != (cfg.model == "logreg"):
        problems.append(
            f"model {cfg.model!r} does not fit dataset {cfg.dataset!r}: synthetic data has 60 "
            f"features (model logreg), digits 64 (mlp or cnn)"
        )
    if cfg.clients < 1:
        problems.append(f"clients must be >= 1, got {cfg.clients}")
    if cfg.clients_per_round is not None and not 1 <= cfg.clients_per_round <= cfg.clients:
        problems.append(f"clients_per_round must be in 1..{cfg.clients}, got {cfg.clients_per_round}")
    if not 0 < cfg.fraction <= 1:
        problems.append(f"fraction must be in (0, 1], got {cfg.fraction}")
    if not (
        isinstance(cfg.min_partition_size, int)
        and not isinstance(cfg.min_partition_size, bool)
        and cfg.min_partition_size >= 1
    ):
        problems.append(f"min_partition_size must be an integer >= 1, got {cfg.min_partition_size!r}")
    if cfg.rounds < 1:
        problems.append(f"rounds must be >= 1, got {cfg.rounds}")
    if cfg.local_epochs < 1:
        problems.append(f"local_epochs must be >= 1, got {cfg.local_epochs}")
    if cfg.batch_size < 0:
        problems.append(f"batch_size must be >= 0 (0 = full batch), got {cfg.batch_size}")
    if not cfg.lr > 0:
        problems.append(f"lr must be > 0, got {cfg.lr}")
    if not (isinstance(cfg.prox_mu, (int, float)) and 0 <= cfg.prox_mu < float("inf")):
        problems.append(f"prox_mu must be a finite number >= 0, got {cfg.prox_mu!r}")
    elif cfg.prox_mu > 0 and cfg.artifacts is None and cfg.optimizer != "sgd":
        problems.append(
            f'prox_mu {cfg.prox_mu:g} (FedProx) needs optimizer = "sgd" (the proximal step is exact '
            f"only for SGD), got {cfg.optimizer!r}"
        )
    if cfg.backend not in BACKENDS:
        problems.append(f"backend must be one of {BACKENDS}, got {cfg.backend!r}")
    if (cfg.artifacts is None) != (cfg.data is None):
        problems.append("--artifacts and --data go together (your own model needs your own data)")
    if not (isinstance(cfg.export_every, int) and not isinstance(cfg.export_every, bool) and cfg.export_every >= 0):
        problems.append(f"export_every must be an integer >= 0 (0: the final model only), got {cfg.export_every!r}")
    if cfg.workers < 0:
        problems.append(f"workers must be >= 0, got {cfg.workers}")
    if not (isinstance(cfg.straggler_fraction, (int, float)) and 0 <= cfg.straggler_fraction <= 1):
        problems.append(f"straggler_fraction must be in [0, 1], got {cfg.straggler_fraction!r}")
    if not (isinstance(cfg.straggler_steps, int) and cfg.straggler_steps >= 1):
        problems.append(f"straggler_steps must be an integer >= 1, got {cfg.straggler_steps!r}")
    if not (isinstance(cfg.byzantine_fraction, (int, float)) and 0 <= cfg.byzantine_fraction < 1):
        problems.append(f"byzantine_fraction must be in [0, 1), got {cfg.byzantine_fraction!r}")
    buffer_size = cfg.fedbuff.buffer_size
    if cfg.fedbuff.is_async and not buffer_size <= cfg.clients:
        problems.append(
            f"buffer_size must be an integer in 1..clients ({cfg.clients}): each client adds at most "
            f"one update to a version's buffer, got {buffer_size!r}"
        )
    if not (isinstance(cfg.step_seconds, (int, float)) and cfg.step_seconds > 0):
        problems.append(f"step_seconds must be > 0, got {cfg.step_seconds!r}")
    for check, value in (
        (_check_strategy, cfg.strategy),
        (_check_server_optimizer, cfg.server_optimizer),
        (_check_attack, cfg.attack),
        (_check_codec, cfg.codec),
        (_check_warmup, cfg.topk_warmup),
        (_check_device_speed, cfg.device_speed),
    ):
        try:
            check(value)
        except ConfigError as e:
            problems.append(str(e))
    problems += _privacy_conflicts(cfg)
    return problems


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
