"""The sections a `CoordinatorConfig` is composed of, one typed dataclass each (`[coordinator.<section>]`).

Each section checks its own fields at construction; `CoordinatorConfig` checks what spans
sections. `SECTIONS` is the order the docs, `--help` and `to_json_dict` list them in.
"""

from __future__ import annotations

from fedort.coordinator.fedbuff.config import FedBuffSettings
from fedort.coordinator.privacy.config import PrivacySettings
from fedort.coordinator.settings.rounds import AggregationSettings, ExportSettings, PlanSettings, TrainingSettings
from fedort.coordinator.settings.serving import AccessSettings, TransportSettings, UploadSettings

SECTIONS: dict[str, type] = {
    "plan": PlanSettings,
    "training": TrainingSettings,
    "aggregation": AggregationSettings,
    "fedbuff": FedBuffSettings,
    "privacy": PrivacySettings,
    "uploads": UploadSettings,
    "export": ExportSettings,
    "transport": TransportSettings,
    "access": AccessSettings,
}

TITLES = {
    "plan": "rounds: how many, who takes part, deadlines",
    "training": "the clients' local training recipe (sent with every task)",
    "aggregation": "how updates are combined into the next global model",
    "fedbuff": "asynchronous mode (FedBuff)",
    "privacy": 'privacy (see README "Privacy" for what each option protects)',
    "uploads": "receiving updates: limits, codecs, durability",
    "export": "the exported inference models",
    "transport": "listening: addresses, TLS, the web port, metrics",
    "access": "who may call and how often",
}

__all__ = [
    "SECTIONS",
    "TITLES",
    "AccessSettings",
    "AggregationSettings",
    "ExportSettings",
    "FedBuffSettings",
    "PlanSettings",
    "PrivacySettings",
    "TrainingSettings",
    "TransportSettings",
    "UploadSettings",
]
