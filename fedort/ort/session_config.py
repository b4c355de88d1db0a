"""`SessionConfig`: how a TrainingSession configures ONNX Runtime (execution providers, threads, options)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import onnxruntime as ort

from fedort.common.errors import ConfigError

Provider = Union[str, tuple[str, Mapping[str, object]]]

# Training in ORT 1.19 runs on these providers only (Module takes a device, not a provider list).
_DEVICE_FOR_PROVIDER = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}


@dataclass(frozen=True)
class SessionConfig:
    """How the ORT sessions are configured (seed: TrainingAgent's providers and session options).

    `providers` are tried in order of precedence; the first one this ORT build offers and can
    train on is used. A provider may carry options as `(name, {"device_id": 1})`.
    """

    providers: tuple[Provider, ...] = ("CPUExecutionProvider",)
    intra_op_threads: int = 0  # 0 = ORT's default (one per core)
    inter_op_threads: int = 0
    config_entries: Mapping[str, str] = field(default_factory=dict)  # SessionOptions.add_session_config_entry

    def session_options(self) -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.intra_op_threads
        so.inter_op_num_threads = self.inter_op_threads
        so.log_severity_level = 3
        for k, v in self.config_entries.items():
            so.add_session_config_entry(k, v)
        return so

    def device(self) -> str:
        available = set(ort.get_available_providers())
        tried = []
        for p in self.providers:
            options: dict[str, Any]
            name, options = (p, {}) if isinstance(p, str) else (p[0], dict(p[1]))
            tried.append(name)
            if name in available and name in _DEVICE_FOR_PROVIDER:
                dev = _DEVICE_FOR_PROVIDER[name]
                return dev if dev == "cpu" else f"{dev}:{int(options.get('device_id', 0))}"
        raise ConfigError(
            f"none of the execution providers {tried} can train here; this ORT offers "
            f"{sorted(available)} and trains on {sorted(_DEVICE_FOR_PROVIDER)}"
        )
