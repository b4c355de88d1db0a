"""fedort: federated learning for models that train on the device with ONNX Runtime's training API.

`import fedort` is the public API. Names load on first use (PEP 562), so importing the package
stays cheap on a device and never pulls in the coordinator, gRPC or ONNX Runtime by itself.
The parts live in subpackages: `fedort.edge_client` (device side), `fedort.coordinator`
(server side), `fedort.protos` (wire contract, shared by both), `fedort.simulations`.
"""

from __future__ import annotations

from fedort.lazy import lazy_exports

from importlib.metadata import PackageNotFoundError, version as _dist_version

try:
    __version__ = _dist_version("fedort")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "TrainingSession": "fedort.edge_client.session",
    "SessionConfig": "fedort.edge_client.session",
    "TrainingModule": "fedort.edge_client.module",
    "Trainer": "fedort.edge_client.trainer",
    "Callback": "fedort.edge_client.trainer",
    "RunResult": "fedort.edge_client.trainer",
    "build_artifacts": "fedort.edge_client.artifacts",
    "load_manifest": "fedort.edge_client.artifacts",
    "Manifest": "fedort.edge_client.artifacts",
    "EdgeClient": "fedort.edge_client.client",
    "EdgeConfig": "fedort.edge_client.client",
    "FedortError": "fedort.protos.errors",
    "ConfigError": "fedort.protos.errors",
    "DataError": "fedort.protos.errors",
    "TrainingError": "fedort.protos.errors",
    "Coordinator": "fedort.coordinator.server",
    "CoordinatorConfig": "fedort.coordinator.config",
}

__all__ = sorted([*_EXPORTS, "__version__"])


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
