"""Import `onnxruntime.training.api` / `.artifacts` without importing torch.

ORT 1.19.2's `onnxruntime/training/__init__.py` imports `optim`, which imports torch
(onnxruntime GitHub issue #22070), although the on-device `api` and the `artifacts` generator need none
of it. We register a bare package object for `onnxruntime.training` (with the real `__path__`)
before importing its submodules, so Python finds them without running that `__init__`.
This module is the only place that knows; a port to a newer ORT touches only here and
`session.py`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator

_PKG = "onnxruntime.training"


def install_bare_training_package() -> None:
    """Register the bare `onnxruntime.training` package; idempotent, and a no-op if one is loaded already.

    Called when `fedort.ort` is imported, so before anything of ours imports `onnxruntime`:
    ORT's own `__init__` then finds the bare package too and skips the real one, which imports
    `onnx` and tries `ortmodule` (start-up time of every process, doing nothing we use).
    Finding the package's folder does not import `onnxruntime`. A module the host application
    loaded first (the real package, with `ORTModule`) stays in place; and the bare package runs the
    real `__init__` into itself the first time something asks it for a name it lacks, so a host that
    imports `onnxruntime.training` after us still gets the real package's names (or its own errors).
    """
    if _PKG not in sys.modules:
        spec = importlib.util.find_spec("onnxruntime")
        if spec is None or not spec.submodule_search_locations:  # pragma: no cover - broken install
            raise ImportError("onnxruntime is not installed; install onnxruntime-training-cpu==1.19.2")
        path = os.path.join(list(spec.submodule_search_locations)[0], "training")
        if not os.path.isdir(path):
            raise ImportError(
                "onnxruntime is installed without its training API; install "
                "onnxruntime-training-cpu==1.19.2 (and uninstall the plain onnxruntime wheel)"
            )
        bare = types.ModuleType(_PKG)
        bare.__path__ = [path]
        bare.__package__ = _PKG
        bare.__getattr__ = _completing(bare, path)  # type: ignore[method-assign]  # a module's PEP 562 hook
        sys.modules[_PKG] = bare


def _completing(bare: types.ModuleType, path: str) -> Callable[[str], object]:
    """The bare package's module `__getattr__`: run the real `__init__` into it once, then look again."""

    def __getattr__(name: str) -> object:
        submodule = os.path.exists(os.path.join(path, name)) or os.path.exists(os.path.join(path, name + ".py"))
        if name.startswith("__") or submodule or "__getattr__" not in vars(bare):
            # a submodule is the import system's to load (it asks here first); dunders are no names of ORT's
            raise AttributeError(f"module {_PKG!r} has no attribute {name!r}")
        del bare.__getattr__  # once: the real __init__'s own lookups must not come back here
        init = os.path.join(path, "__init__.py")
        spec = importlib.util.spec_from_file_location(_PKG, init, submodule_search_locations=[path])
        if spec is None or spec.loader is None:  # pragma: no cover - broken install
            raise AttributeError(f"module {_PKG!r} has no attribute {name!r}")
        bare.__file__ = init
        spec.loader.exec_module(bare)
        return getattr(bare, name)

    return __getattr__


def _training_package() -> None:
    """`onnxruntime` imported, with the bare training package registered first and bound as its attribute."""
    install_bare_training_package()
    import onnxruntime

    if getattr(onnxruntime, "training", None) is None:
        onnxruntime.training = sys.modules[_PKG]


def training_api() -> types.ModuleType:
    """`onnxruntime.training.api` (CheckpointState, Module, Optimizer, LinearLRScheduler)."""
    _training_package()
    return importlib.import_module(_PKG + ".api")


def artifacts_api() -> types.ModuleType:
    """`onnxruntime.training.artifacts` (generate_artifacts, LossType, OptimType)."""
    _training_package()
    return importlib.import_module(_PKG + ".artifacts")


def reset_graph_names() -> None:
    """Restart onnxblock's process-global counter for generated names (`onnx::loss::2`, ...).

    Without this the second build in one process names the loss `onnx::loss::8`, so identical
    models would get different artifacts bytes, a different loss output name and a different
    model id depending on what the process built before.
    """
    _training_package()
    # private ORT module state
    importlib.import_module(_PKG + ".onnxblock._graph_utils")._GRAPH_TOKEN = 0  # type: ignore[attr-defined]


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence ORT's C++ INFO lines, which go straight to fd 2 and ignore the log severity."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
