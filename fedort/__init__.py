"""fedort: federated learning for models that train on the device with ONNX Runtime's training API.

`import fedort` is the public API. Names load on first use (PEP 562), so importing the package
stays cheap on a device and never pulls in the coordinator, gRPC or ONNX Runtime by itself.
The parts live in subpackages: `fedort.edge_client` (device side), `fedort.coordinator`
(server side), `fedort.protos` (wire contract, shared by both), `fedort.simulations`.
"""

from __future__ import annotations

from fedort.common.lazy import lazy_exports

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # device side: training over ORT artifacts, the edge client
    "TrainingSession": "fedort.ort.session",
    "SessionConfig": "fedort.ort.session",
    "TrainingModule": "fedort.edge_client.training.module",
    "Trainer": "fedort.edge_client.training.trainer",
    "Callback": "fedort.edge_client.training.trainer",
    "RunResult": "fedort.edge_client.training.trainer",
    "EdgeClient": "fedort.edge_client.client",
    "EdgeConfig": "fedort.edge_client.client",
    "ClientData": "fedort.common.client_data",
    # artifacts
    "build_artifacts": "fedort.ort.artifacts",
    "load_manifest": "fedort.ort.artifacts",
    "Manifest": "fedort.ort.artifacts",
    "builtin_model": "fedort.ort.models",
    "artifacts_from_torch": "fedort.ort.from_torch",  # needs the fedort[torch] extra
    "export_torch": "fedort.ort.from_torch",
    # server side: the coordinator and the stages of its aggregation pipeline
    "Coordinator": "fedort.coordinator.server",
    "CoordinatorConfig": "fedort.coordinator.config",
    "RunOutcome": "fedort.coordinator.engine.round_engine",
    "RoundState": "fedort.common.round_state",
    "Strategy": "fedort.coordinator.aggregation.strategies",
    "parse_strategy": "fedort.coordinator.aggregation.strategies",
    "Transform": "fedort.coordinator.aggregation.transform",
    "NormClip": "fedort.coordinator.aggregation.clipping",
    "Combiner": "fedort.coordinator.aggregation.combiner",
    "WeightedMean": "fedort.coordinator.aggregation.weighted_sum",
    "ServerUpdate": "fedort.coordinator.aggregation.server_update",
    "ServerOptimizerStage": "fedort.coordinator.aggregation.server_optimizers.stage",
    "parse_server_optimizer": "fedort.coordinator.aggregation.server_optimizers",
    "Update": "fedort.coordinator.aggregation.update",
    # the one exception tree
    "FedortError": "fedort.common.errors",
    "ConfigError": "fedort.common.errors",
    "MissingExtraError": "fedort.common.errors",
    "DataError": "fedort.common.errors",
    "VectorError": "fedort.common.errors",
    "ArtifactError": "fedort.common.errors",
    "TrainingError": "fedort.common.errors",
    "ProtocolError": "fedort.common.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])


_export, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


def __getattr__(name: str):
    """`__version__` is read from the installed metadata on first use (importlib.metadata is not
    free, and every spawned simulation worker would pay for it otherwise); other names load their module."""
    if name != "__version__":
        return _export(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("fedort")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
