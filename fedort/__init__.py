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
    "TrainingSession": "fedort.edge_client.session",
    "SessionConfig": "fedort.edge_client.session",
    "TrainingModule": "fedort.edge_client.module",
    "Trainer": "fedort.edge_client.trainer",
    "Callback": "fedort.edge_client.trainer",
    "RunResult": "fedort.edge_client.trainer",
    "build_artifacts": "fedort.edge_client.artifacts",
    "load_manifest": "fedort.edge_client.artifacts",
    "Manifest": "fedort.edge_client.artifacts",
    "artifacts_from_torch": "fedort.torch_artifacts",   # needs the fedort[torch] extra
    "export_torch": "fedort.torch_artifacts",
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
