"""fedort: federated learning for models that train on the device with ONNX Runtime's training API.

`import fedort` is the public API. Names load on first use (PEP 562), so importing the package
stays cheap on a device and never pulls in the coordinator, gRPC or ONNX Runtime by itself.
The parts live in subpackages: `fedort.edge_client` (device side), `fedort.coordinator`
(server side), `fedort.protos` (wire contract, shared by both), `fedort.simulations`.
"""

from __future__ import annotations

from fedort.lazy import lazy_exports


# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # device side: training over ORT artifacts, the edge client
    "TrainingSession": "fedort.edge_client.session",
    "SessionConfig": "fedort.edge_client.session",
    "TrainingModule": "fedort.edge_client.module",
    "Trainer": "fedort.edge_client.trainer",
    "Callback": "fedort.edge_client.trainer",
    "RunResult": "fedort.edge_client.trainer",
    "EdgeClient": "fedort.edge_client.client",
    "EdgeConfig": "fedort.edge_client.client",
    "ClientData": "fedort.edge_client.client_data",
    # artifacts
    "build_artifacts": "fedort.edge_client.artifacts",
    "load_manifest": "fedort.edge_client.artifacts",
    "Manifest": "fedort.edge_client.artifacts",
    "builtin_model": "fedort.edge_client.models",
    "artifacts_from_torch": "fedort.torch_artifacts",   # needs the fedort[torch] extra
    "export_torch": "fedort.torch_artifacts",
    # server side: the coordinator and the stages of its aggregation pipeline
    "Coordinator": "fedort.coordinator.server",
    "CoordinatorConfig": "fedort.coordinator.config",
    "RunOutcome": "fedort.coordinator.round_engine",
    "RoundState": "fedort.protos.round_state",
    "Strategy": "fedort.coordinator.aggregation.strategies",
    "parse_strategy": "fedort.coordinator.aggregation.strategies",
    "Transform": "fedort.coordinator.aggregation.transform",
    "NormClip": "fedort.coordinator.aggregation.clipping",
    "Combiner": "fedort.coordinator.aggregation.combiner",
    "WeightedMean": "fedort.coordinator.aggregation.weighted_sum",
    "ServerUpdate": "fedort.coordinator.aggregation.server_update",
    "ServerOptimizerStage": "fedort.coordinator.server_optimizers.stage",
    "parse_server_optimizer": "fedort.coordinator.server_optimizers",
    "Update": "fedort.coordinator.aggregation.update",
    # the one exception tree
    "FedortError": "fedort.protos.errors",
    "ConfigError": "fedort.protos.errors",
    "MissingExtraError": "fedort.protos.errors",
    "DataError": "fedort.protos.errors",
    "VectorError": "fedort.protos.errors",
    "ArtifactError": "fedort.protos.errors",
    "TrainingError": "fedort.protos.errors",
    "ProtocolError": "fedort.protos.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])


_export, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


def __getattr__(name: str):
    """`__version__` is read from the installed metadata on first use (importlib.metadata costs
    ~15 ms, paid by every spawned simulation worker otherwise); other names load their module."""
    if name != "__version__":
        return _export(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("fedort")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
