"""The coordinator config of a simulation: the deployed coordinator, set up for a closed population
of simulated clients on this machine."""

from __future__ import annotations

from pathlib import Path

from fedort.coordinator import CoordinatorConfig
from fedort.coordinator.settings import (
    AccessSettings,
    AggregationSettings,
    ExportSettings,
    PlanSettings,
    TrainingSettings,
    TransportSettings,
    UploadSettings,
)
from fedort.simulations.config import SimulationConfig


def _family(codec: str) -> str:
    """What the run allows for its clients' codec: top-k as the family (any fraction: the warm-up's), else the spec."""
    from fedort.protos.update_codecs import parse_codec

    spec = parse_codec(codec)
    return ("zstd+topk" if spec.zstd else "topk") if spec.name == "topk" else spec.canonical


def coordinator_config(
    cfg: SimulationConfig, artifacts: Path, state_dir: Path, eval_data: Path | None, clients: int
) -> CoordinatorConfig:
    """The deployment coordinator, configured for a closed population of simulated clients."""
    per_round = min(cfg.per_round, clients)
    return CoordinatorConfig(
        artifacts=artifacts,
        state_dir=state_dir,
        plan=PlanSettings(
            rounds=cfg.rounds,
            min_clients=per_round,
            min_available_clients=clients,  # wait for every client: selection is then reproducible
            # selection takes max(min_clients, ceil(fraction * available)); this makes it exactly per_round
            fraction=1.0 if per_round >= clients else (per_round - 0.5) / clients,
            round_timeout_s=cfg.round_timeout_s,
            seed=cfg.seed,
            client_timeout_s=0,  # virtual clients are polled once a round, not heartbeating
        ),
        training=TrainingSettings(
            local_epochs=cfg.local_epochs,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            reset_optimizer=cfg.reset_optimizer,
            prox_mu=cfg.prox_mu,
        ),
        aggregation=AggregationSettings(strategy=cfg.strategy, server_optimizer=cfg.server_optimizer),
        fedbuff=cfg.fedbuff,
        privacy=cfg.privacy,
        # the run allows what its clients use
        uploads=UploadSettings(codecs=("raw",) if cfg.codec == "raw" else ("raw", _family(cfg.codec))),
        export=ExportSettings(export_every=cfg.export_every, eval_data=eval_data),
        # local, loopback-only run of our own virtual clients: plaintext, no device tokens, no rate limits (all
        # its clients join from one address, which the deployed per-address limit would throttle)
        transport=TransportSettings(address="127.0.0.1:0", insecure=True),
        access=AccessSettings(
            auth="open", submissions_per_minute=0, joins_per_minute=0, joins_per_minute_per_address=0
        ),
    )
