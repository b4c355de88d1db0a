"""Device side of fedort: train ONNX models on the device with ONNX Runtime, take part in rounds.

    from fedort.edge_client import TrainingSession, TrainingModule, Trainer, build_artifacts
    from fedort.edge_client.models import mlp

    build_artifacts(mlp(), "artifacts/")
    session = TrainingSession.from_artifacts("artifacts/")
    result = Trainer(max_epochs=5).fit(TrainingModule(session, lr=0.01), "client-0000.npz")

Names are imported on first use (PEP 562), so `import edge_client` stays cheap on a device and
pulls in neither ONNX Runtime nor gRPC until they are needed. Never imports torch or `coordinator`.
"""

from __future__ import annotations

import contextlib

from fedort.edge_client import _ort
from fedort.lazy import lazy_exports

with contextlib.suppress(ImportError):   # a missing ORT is reported where it is used, with its fix
    _ort.install_bare_training_package()   # before any of our modules imports onnxruntime (see _ort.py)

from typing import TYPE_CHECKING

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # training core
    "TrainingSession": "fedort.edge_client.session",
    "SessionConfig": "fedort.edge_client.session",
    "TrainingModule": "fedort.edge_client.module",
    "ConstantLR": "fedort.edge_client.module",
    "LinearWarmupDecay": "fedort.edge_client.module",
    "Trainer": "fedort.edge_client.trainer",
    "Callback": "fedort.edge_client.trainer",
    "RunResult": "fedort.edge_client.trainer",
    "build_artifacts": "fedort.edge_client.artifacts",
    "load_manifest": "fedort.edge_client.artifacts",
    "verify_artifacts": "fedort.edge_client.artifacts",
    "Manifest": "fedort.edge_client.artifacts",
    "TensorSpec": "fedort.edge_client.artifacts",
    "ARTIFACT_FILES": "fedort.edge_client.artifacts",
    # errors
    "FedortError": "fedort.protos.errors",
    "ConfigError": "fedort.protos.errors",
    "DataError": "fedort.protos.errors",
    "VectorError": "fedort.protos.errors",
    "ArtifactError": "fedort.protos.errors",
    "TrainingError": "fedort.protos.errors",
    # edge runtime
    "EdgeClient": "fedort.edge_client.client",
    "EdgeConfig": "fedort.edge_client.client",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from fedort.protos.errors import ArtifactError, ConfigError, DataError, FedortError, TrainingError, VectorError
    from fedort.edge_client.artifacts import ARTIFACT_FILES, Manifest, TensorSpec, build_artifacts, load_manifest, verify_artifacts
    from fedort.edge_client.client import EdgeClient, EdgeConfig
    from fedort.edge_client.module import ConstantLR, LinearWarmupDecay, TrainingModule
    from fedort.edge_client.session import SessionConfig, TrainingSession
    from fedort.edge_client.trainer import Callback, RunResult, Trainer
