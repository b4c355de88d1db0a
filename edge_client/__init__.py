"""Device side of fedort: train ONNX models on the device with ONNX Runtime, take part in rounds.

    from fedort.edge_client import TrainingSession, TrainingModule, Trainer, build_artifacts
    from fedort.ort.models import mlp

    build_artifacts(mlp(), "artifacts/")
    session = TrainingSession.from_artifacts("artifacts/")
    result = Trainer(max_epochs=5).fit(TrainingModule(session, lr=0.01), "client-0000.npz")

Names are imported on first use (PEP 562), so `import edge_client` stays cheap on a device and
pulls in neither ONNX Runtime nor gRPC until they are needed. Never imports torch or `coordinator`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import fedort.ort  # noqa: F401  (registers the torch-free onnxruntime.training before anything imports ORT)
from fedort.common.lazy import lazy_exports

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # training core
    "TrainingSession": "fedort.ort.session",
    "SessionConfig": "fedort.ort.session",
    "TrainingModule": "fedort.edge_client.training.module",
    "ConstantLR": "fedort.edge_client.training.module",
    "LinearWarmupDecay": "fedort.edge_client.training.module",
    "Trainer": "fedort.edge_client.training.trainer",
    "Callback": "fedort.edge_client.training.trainer",
    "RunResult": "fedort.edge_client.training.trainer",
    "build_artifacts": "fedort.ort.artifacts",
    "load_manifest": "fedort.ort.artifacts",
    "verify_artifacts": "fedort.ort.artifacts",
    "Manifest": "fedort.ort.artifacts",
    "TensorSpec": "fedort.ort.artifacts",
    "ARTIFACT_FILES": "fedort.ort.artifacts",
    # errors
    "FedortError": "fedort.common.errors",
    "ConfigError": "fedort.common.errors",
    "DataError": "fedort.common.errors",
    "VectorError": "fedort.common.errors",
    "ArtifactError": "fedort.common.errors",
    "TrainingError": "fedort.common.errors",
    # edge runtime
    "EdgeClient": "fedort.edge_client.client.edge_client",
    "EdgeConfig": "fedort.edge_client.client.edge_client",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from fedort.common.errors import ArtifactError, ConfigError, DataError, FedortError, TrainingError, VectorError
    from fedort.edge_client.client.edge_client import EdgeClient, EdgeConfig
    from fedort.edge_client.training.module import ConstantLR, LinearWarmupDecay, TrainingModule
    from fedort.edge_client.training.trainer import Callback, RunResult, Trainer
    from fedort.ort.artifacts import (
        ARTIFACT_FILES,
        Manifest,
        TensorSpec,
        build_artifacts,
        load_manifest,
        verify_artifacts,
    )
    from fedort.ort.session import SessionConfig, TrainingSession
