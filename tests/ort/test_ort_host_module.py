"""Importing fedort.edge_client (and training with it) leaves the host process's `onnxruntime.training` alone.

Each check runs in a fresh interpreter, since what is at stake is the state of `sys.modules`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import pytest


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


# What a host application that imported the real package (with torch, for ORTModule) has in sys.modules:
# a package object on ORT's training folder, with names of its own. torch is not a dependency of ours,
# so the host's module is made here the way the import system would register it.
HOST_LOADED_FIRST = """
    import importlib.util, os, sys, types
    import onnxruntime
    folder = os.path.join(list(importlib.util.find_spec("onnxruntime").submodule_search_locations)[0], "training")
    host = types.ModuleType("onnxruntime.training")
    host.__path__ = [folder]
    host.ORTModule = "the host's ORTModule"
    sys.modules["onnxruntime.training"] = host
    onnxruntime.training = host

    import fedort.edge_client
    from fedort.edge_client import TrainingSession, build_artifacts
    from fedort.ort.models import mlp
    build_artifacts(mlp(), "art")
    session = TrainingSession.from_artifacts("art")
    assert session.parameter_count() > 0
    assert sys.modules["onnxruntime.training"] is host and onnxruntime.training is host, sys.modules["onnxruntime.training"]
    from onnxruntime.training import ORTModule
    print(ORTModule)
"""


@pytest.mark.slow
def test_a_training_package_the_host_loaded_first_stays_in_place(tmp_path):
    result = _run(HOST_LOADED_FIRST, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "the host's ORTModule"


# After fedort: the host asks the training package for a name of the real package's own __init__.
LATER_IMPORT = """
    import sys
    {before}
    try:
        import onnxruntime.training
        from onnxruntime.training import is_ortmodule_available
        print("ok", is_ortmodule_available.__module__)
    except ImportError as e:
        print(type(e).__name__, e)
"""
WITH_FEDORT = """
    import fedort.edge_client
    from fedort.edge_client import TrainingSession, build_artifacts
    from fedort.ort.models import mlp
    build_artifacts(mlp(), "art")
    TrainingSession.from_artifacts("art")
"""


@pytest.mark.slow
def test_a_later_import_of_the_training_package_sees_the_real_one(tmp_path):
    """Whatever the real package gives the host without fedort (its names, or its own ImportError when
    torch is missing), it gives after fedort registered its bare package and trained with it."""
    alone = _run(LATER_IMPORT.format(before="pass"), tmp_path)
    after = _run(LATER_IMPORT.format(before=textwrap.indent(textwrap.dedent(WITH_FEDORT), "    ").strip()), tmp_path)
    assert alone.returncode == 0 and after.returncode == 0, (alone.stderr, after.stderr)
    assert after.stdout == alone.stdout
