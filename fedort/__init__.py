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
    "TrainingSession": "fedort.ort.session",
    "SessionConfig": "fedort.ort.session",
    "TrainingModule": "fedort.edge_client.training.module",
    "Trainer": "fedort.edge_client.training.trainer",
    "Callback": "fedort.edge_client.training.trainer",
    "RunResult": "fedort.edge_client.training.trainer",
    "build_artifacts": "fedort.ort.artifacts",
    "load_manifest": "fedort.ort.artifacts",
    "Manifest": "fedort.ort.artifacts",
    "EdgeClient": "fedort.edge_client.client.edge_client",
    "EdgeConfig": "fedort.edge_client.client.edge_client",
    "FedortError": "fedort.common.errors",
    "ConfigError": "fedort.common.errors",
    "DataError": "fedort.common.errors",
    "TrainingError": "fedort.common.errors",
    "Coordinator": "fedort.coordinator.server",
    "CoordinatorConfig": "fedort.coordinator.config",
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
